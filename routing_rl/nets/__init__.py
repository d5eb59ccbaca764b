"""Builders for routed networks."""
