"""Forward one dashboard request to the supervised child with the child's key, streaming what
streams.

Invariants:
- The query string goes through unchanged (the page marks its polling with `POLL_QUERY`, which
  the child's access lines then carry and the log pane leaves out).
- A Server-Sent Events answer (`stream: true` chat) is passed on chunk by chunk as the child
  sends it; when the browser goes away (the page's Stop aborts its fetch), the stream is closed,
  the child sees its client gone and aborts the request.
- The child's own error (OpenAI shape) is passed on with its status; a child that does not
  answer is a 502 in the manager's error shape.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
from fastapi.responses import JSONResponse, Response, StreamingResponse

# A non-streamed chat on a CPU host can take a minute; the connect fails fast when nothing listens.
TIMEOUT = httpx.Timeout(120.0, connect=5.0)


async def forward(
    client: httpx.AsyncClient, url: str, method: str, body: bytes | None, api_key: str
) -> Response:
    headers = {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"}
    request = client.build_request(method, url, content=body, headers=headers, timeout=TIMEOUT)
    try:
        upstream = await client.send(request, stream=True)
    except httpx.HTTPError as e:
        return bad_gateway(e)
    media_type = upstream.headers.get("content-type")
    if media_type is not None and media_type.startswith("text/event-stream"):
        return StreamingResponse(_relay(upstream), status_code=upstream.status_code, media_type=media_type)
    try:
        content = await upstream.aread()
    except httpx.HTTPError as e:
        return bad_gateway(e)
    finally:
        await upstream.aclose()
    return Response(content, status_code=upstream.status_code, media_type=media_type)


async def _relay(upstream: httpx.Response) -> AsyncIterator[bytes]:
    try:
        async for chunk in upstream.aiter_raw():
            yield chunk
    finally:  # the browser left (or the child ended): close the child's connection too
        await upstream.aclose()


def bad_gateway(e: Exception) -> JSONResponse:
    message = f"the server did not answer: {type(e).__name__}: {e}"
    return JSONResponse({"error": {"message": message, "type": "bad_gateway"}}, status_code=502)
