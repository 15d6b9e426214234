"""The text operators."""
