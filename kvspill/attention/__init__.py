"""Attention beyond the gpu tier: exact cold paths (attention.cold) and sparse block selection
(attention.sparse)."""
