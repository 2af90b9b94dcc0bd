"""GGUF files: the reader, fast metadata paths, the config/tokenizer cache."""
