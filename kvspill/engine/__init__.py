"""The engine: LLMEngine (core), its client protocol, start-up, checks, tensor-parallel workers,
warm-up, persistence of prefix KV, step sizing."""
