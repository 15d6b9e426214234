"""Importer registrations for com.microsoft products and quantization: see
sonnx.autograd.contrib_quant."""

from sonnx.autograd.contrib_quant import GatherBlockQuantized, MatMulNBits
from sonnx.onnx.registry import register_operator

for _cls in (GatherBlockQuantized, MatMulNBits):
    register_operator(_cls, 1, domain="com.microsoft")
