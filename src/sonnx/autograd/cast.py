"""Element-type conversion: Cast and CastLike across every ONNX type torch holds, the 8-bit floats
and the 4-bit types included.
"""

__all__: list[str] = []
