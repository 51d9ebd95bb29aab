"""ragline api package."""
