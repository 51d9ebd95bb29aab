"""ragline index package."""
