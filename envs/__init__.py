"""Gymnasium environments for routing decisions."""
