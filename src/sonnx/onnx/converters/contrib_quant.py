"""Importer registrations for com.microsoft products and quantization: see
sonnx.autograd.contrib_quant, contrib_quant_integer and contrib_fused."""

from sonnx.autograd.contrib_fused import FusedConv, FusedGemm, FusedMatMul
from sonnx.autograd.contrib_quant import GatherBlockQuantized, MatMulNBits
from sonnx.autograd.contrib_quant_integer import DynamicQuantizeMatMul, MatMulIntegerToFloat
from sonnx.onnx.registry import register_operator

for _cls in (
    DynamicQuantizeMatMul,
    FusedConv,
    FusedGemm,
    FusedMatMul,
    GatherBlockQuantized,
    MatMulIntegerToFloat,
    MatMulNBits,
):
    register_operator(_cls, 1, domain="com.microsoft")
