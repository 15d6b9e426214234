"""Helpers for testing and benchmarking sonnx against PyTorch and onnxruntime."""
