"""The reduce operators."""
