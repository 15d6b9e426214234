"""Importer registrations for quantization: see sonnx.operators.quantize.linear."""

from sonnx.onnx.registry import register_operators
from sonnx.operators.quantize.linear import DequantizeLinear, DynamicQuantizeLinear, QuantizeLinear

register_operators(QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear)
