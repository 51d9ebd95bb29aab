"""ragline catalog package."""
