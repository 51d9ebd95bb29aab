"""ragline rerank package."""
