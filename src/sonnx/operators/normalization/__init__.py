"""The normalization operators."""
