"""Text in and out: the tokenizer, incremental detokenization, stop strings, precache prompts."""
