"""ragline retrieve package."""

from retrieve.planner import SearchPlan, plan_search, search_shard

__all__ = ["SearchPlan", "plan_search", "search_shard"]
