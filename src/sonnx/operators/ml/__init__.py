"""The ml operators."""
