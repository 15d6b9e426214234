"""The attention operators."""
