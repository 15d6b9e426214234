"""The linalg operators."""
