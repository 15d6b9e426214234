"""Every operation, one class per ONNX operator, in subpackages by family."""
