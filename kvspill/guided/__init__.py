"""Guided decoding: what a request's output must match, compiled into a per-token bitmask.

`spec` (torch-free) is what `SamplingParams` carries; `schema_check` refuses JSON-schema keywords
the grammar engine would not enforce; `compiler` turns a spec into an xgrammar grammar (cached)
and a matcher per request; `bitmask` advances the matchers of a batch and masks its logits.
"""
