"""Importer registrations for quantization: see sonnx.operators.quantize.linear."""

from sonnx.onnx.registry import register_operator
from sonnx.operators.quantize.linear import DequantizeLinear, DynamicQuantizeLinear, QuantizeLinear

register_operator(QuantizeLinear, 10, 13, 19, 21, 23, 24, 25, 28)
register_operator(DequantizeLinear, 10, 13, 19, 21, 23, 24, 25, 28)
register_operator(DynamicQuantizeLinear, 11)
