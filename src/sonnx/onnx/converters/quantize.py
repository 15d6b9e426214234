"""Importer registrations for quantization: see sonnx.autograd.quantize."""

from sonnx.autograd.quantize import DequantizeLinear, DynamicQuantizeLinear, QuantizeLinear
from sonnx.onnx.registry import register_operator

register_operator(QuantizeLinear, 10, 13, 19, 21, 23, 24, 25, 28)
register_operator(DequantizeLinear, 10, 13, 19, 21, 23, 24, 25, 28)
register_operator(DynamicQuantizeLinear, 11)
