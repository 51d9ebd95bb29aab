"""ragline bench package."""
