"""The conv operators."""
