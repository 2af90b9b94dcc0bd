"""Query-aware selection of cold blocks for sparse decode: scoring, anchors, the GPU block
cache (the key summaries they score live with the blocks: storage.summary)."""
