"""ragline core package."""
