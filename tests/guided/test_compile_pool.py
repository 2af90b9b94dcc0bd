"""Trial compiles in worker processes (`compile_pool.py`) over a small raw vocabulary: a compile
past the deadline is a 400 naming it and its worker is replaced; a cancelled trial kills its
worker; errors come back as the in-process compiler's. One pool (one worker start, about 2-3 s)
for the module."""

from __future__ import annotations

import asyncio
import pickle
import time

import pytest

from kvspill.errors import InvalidParameterError
from kvspill.guided.compile_pool import CompilePool
from kvspill.guided.spec import GuidedSpec

xgr = pytest.importorskip("xgrammar")

# Printable ASCII, a few longer pieces and a stop token: enough to spell JSON and regexes.
VOCAB = [chr(c) for c in range(32, 127)] + ['{"', '":', '",', "</s>"]
# Many optional properties of which at least one must appear: minutes to compile on this vocabulary
# (xgrammar 0.2.9, 2-core CPU: 100 properties 0.4 s, 200 9.8 s, 400 224 s). Without minProperties
# 400 properties took 0.12 s with 0.2.8 and 0.02 s with 0.2.9, inside the 0.05 s deadline: keep the
# margin wide, a deadline test must not depend on how fast the compiler got.
SLOW = {
    "type": "object",
    "properties": {f"p{i}": {"type": "string"} for i in range(400)},
    "minProperties": 1,
}


def _info_json() -> str:
    return str(xgr.TokenizerInfo(VOCAB, stop_token_ids=[len(VOCAB) - 1]).serialize_json())


def _run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


def test_deadline_replacement_cancel_and_errors() -> None:
    async def main() -> None:
        pool = CompilePool(_info_json, num_workers=1, timeout_s=30.0)
        try:
            assert await pool.trial(GuidedSpec.json_schema({"type": "integer"})) < 5  # boots the worker
            pool.timeout_s = 0.05

            start = time.monotonic()
            with pytest.raises(InvalidParameterError, match=r"--guided-compile-timeout=0.05") as info:
                await pool.trial(GuidedSpec.json_schema(SLOW, "guided_json"))
            assert info.value.param == "guided_json" and time.monotonic() - start < 1.0
            assert pool.num_replaced == 1
            pool.timeout_s = 30.0
            assert await pool.trial(GuidedSpec("regex", "[a-z]+")) >= 0  # the new worker answers

            # cancelled mid-compile, as when the client disconnects
            task = asyncio.ensure_future(pool.trial(GuidedSpec.json_schema({**SLOW, "title": "x"})))
            await asyncio.sleep(0.03)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert pool.num_replaced == 2

            with pytest.raises(InvalidParameterError, match='Rule "foo" is not defined'):
                await pool.trial(GuidedSpec("grammar", "root ::= foo", "guided_grammar"))
            with pytest.raises(InvalidParameterError, match="minLength 5 is greater than maxLength 2"):
                await pool.trial(GuidedSpec.json_schema({"type": "string", "minLength": 5, "maxLength": 2}))
            assert pool.num_alive == 1
        finally:
            pool.close()
        assert pool.num_alive == 0

    _run(main())


def test_a_spec_pickles_without_its_compiled_grammar() -> None:
    spec = GuidedSpec.json_schema({"type": "integer"}).with_compiled(object())
    copy = pickle.loads(pickle.dumps(spec))
    assert copy == spec and copy.compiled is None and spec.compiled is not None


def test_a_worker_that_dies_starting_is_a_quick_busy_answer() -> None:
    """A worker that exits while starting (here: a tokenizer it cannot read) must answer the trial
    at once, not after the 120 s start timeout (the parent held the pipe's other end open)."""
    from kvspill.guided.compile_pool import CompilePoolBusyError

    async def main() -> None:
        pool = CompilePool(lambda: "not a tokenizer", num_workers=1, timeout_s=30.0)
        try:
            start = time.monotonic()
            with pytest.raises(CompilePoolBusyError, match="could not start"):
                await pool.trial(GuidedSpec("regex", "[a-z]+"))
            assert time.monotonic() - start < 30
        finally:
            pool.close()

    _run(main())


def test_a_vocabulary_that_cannot_start_json_keeps_its_worker() -> None:
    """The worker's warm-up compiles a JSON object; a vocabulary without '{' must not kill it."""

    def digits_only() -> str:
        return str(
            xgr.TokenizerInfo([str(d) for d in range(10)] + ["</s>"], stop_token_ids=[10]).serialize_json()
        )

    async def main() -> None:
        pool = CompilePool(digits_only, num_workers=1, timeout_s=30.0)
        try:
            assert await pool.trial(GuidedSpec("regex", "[0-9]+")) >= 0
            with pytest.raises(InvalidParameterError, match="can start"):
                await pool.trial(GuidedSpec("json_object"))
        finally:
            pool.close()

    _run(main())
