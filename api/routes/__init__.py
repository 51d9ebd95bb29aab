"""ragline api/routes package."""
