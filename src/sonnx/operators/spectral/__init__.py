"""The spectral operators."""
