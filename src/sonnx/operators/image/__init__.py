"""The image operators."""
