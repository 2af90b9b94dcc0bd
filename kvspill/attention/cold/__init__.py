"""Attention over cold KV: one module per path (cpu, stream, split inside dispatch, sparse), the
LSE merge, the stream path's CUDA-graph form."""
