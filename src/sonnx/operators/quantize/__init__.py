"""The quantize operators."""
