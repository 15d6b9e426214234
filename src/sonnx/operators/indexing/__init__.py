"""The indexing operators."""
