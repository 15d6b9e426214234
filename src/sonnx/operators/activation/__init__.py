"""The activation operators."""
