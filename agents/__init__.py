"""Learners that train routed networks."""
