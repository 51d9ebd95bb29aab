"""ragline authz package."""
