"""ragline jobs package."""
