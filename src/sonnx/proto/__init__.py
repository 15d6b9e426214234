"""ONNX's vocabulary every operator speaks: schema attribute defaults, writing nodes and tensors."""
