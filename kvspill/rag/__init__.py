"""The RAG embedding cache: embed texts once, index a code repository, search it.

Parts (each importable alone; only `model` needs torch, none needs a web framework):
- `model`: a sentence-transformers directory loaded with transformers, mean pooling, normalised.
- `chunker`: a file's text -> overlapping chunks of lines.
- `files`: the files of a directory that pass the glob filters and .gitignore.
- `store`: SQLite (WAL) holding content hash -> vector, indexed files and their chunks.
- `index`: exact NumPy top-k search, and an ANN index (usearch) past a size threshold.
- `lexical`: identifier terms (split on `_`, `.` and case) for the store's FTS5 table.
- `fusion`: reciprocal rank fusion of the dense and full-text rankings (hybrid search).
- `model_dir`, `lazy_embedder`: the model's name without loading it; a model loaded on first use.
- `service`: `RagService`, what the HTTP routes and the `kvspill rag` CLI call.

Nothing is imported here, so that `kvspill.rag.service` stays torch-free.
"""
