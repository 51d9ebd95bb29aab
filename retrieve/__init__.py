"""ragline retrieve package."""
