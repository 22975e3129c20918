"""Embedding models: the Embedder protocol, fastembed and hashing embedders, the packaged int8 MiniLM."""
