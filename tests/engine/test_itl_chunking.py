"""--target-itl-ms on a real engine: while a request decodes, a long prompt is prefilled in
chunks no larger than the budget's cap, and the tokens are those of an engine without it."""

from __future__ import annotations

from pathlib import Path

from kvspill.engine.core import LLMEngine
from kvspill.plan.choices import PREFILL_FLOOR_TOKENS
from kvspill.sampling_params import SamplingParams

PARAMS = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True, detokenize=False)


def _run(engine: LLMEngine) -> dict[str, list[int]]:
    """Greedy tokens per request: a chat that decodes while a 600-token prompt arrives."""
    chat = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True, detokenize=False)
    engine.add_request(list(range(3, 20)), chat, req_id="chat")
    tokens: dict[str, list[int]] = {}
    for i in range(400):
        if i == 2:
            engine.add_request([(7 * j) % 250 + 3 for j in range(600)], PARAMS, req_id="long")
        outputs = engine.step()
        for out in outputs:
            if out.finished:
                tokens[out.req_id] = out.token_ids
        if not engine.has_unfinished_requests():
            break
    return tokens


def test_prefill_chunks_capped_while_decoding_and_tokens_unchanged(tiny_llama_dir: Path) -> None:
    options = dict(
        model=str(tiny_llama_dir),
        device="cpu",
        dtype="float32",
        max_model_len=1024,
        max_num_batched_tokens=1024,
    )
    capped = LLMEngine(target_itl_ms=0.001, **options)  # unreachable: the floor is the cap
    assert capped.scheduler.prefill_token_cap == PREFILL_FLOOR_TOKENS
    seen: list[dict[str, int]] = []
    schedule = capped.scheduler.schedule

    def recording_schedule():  # type: ignore[no-untyped-def]
        batch = schedule()
        seen.append(dict(batch.num_scheduled_tokens))
        return batch

    capped.scheduler.schedule = recording_schedule  # type: ignore[method-assign]
    got = _run(capped)
    long_while_decoding = [s["long"] for s in seen if "long" in s and s.get("chat") == 1]
    assert long_while_decoding and max(long_while_decoding) <= PREFILL_FLOOR_TOKENS
    assert sum(s.get("long", 0) for s in seen) >= 600
    plain = LLMEngine(target_itl_ms=0, **options)
    assert plain.scheduler.prefill_token_cap is None
    expected = _run(plain)
    assert got == expected and set(got) == {"chat", "long"}
