"""The pooling operators."""
