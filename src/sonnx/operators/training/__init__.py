"""The training operators."""
