"""The singa operators."""
