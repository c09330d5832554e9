"""Split-KV attention for the MTP verify over vLLM's paged KV cache, beside its float64 oracle (reference.py)."""
