"""ragline ingest package."""
