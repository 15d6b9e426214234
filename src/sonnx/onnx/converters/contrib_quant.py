"""Importer registrations for com.microsoft products and quantization: see
sonnx.autograd.contrib_quant, contrib_quant_integer, contrib_fused and contrib_qlinear."""

from sonnx.autograd.contrib_fused import FusedConv, FusedGemm, FusedMatMul, NhwcConv
from sonnx.autograd.contrib_qlinear import (
    DequantizeLinear,
    QGemm,
    QLinearAdd,
    QLinearAveragePool,
    QLinearConcat,
    QLinearGlobalAveragePool,
    QLinearLeakyRelu,
    QLinearMul,
    QLinearSigmoid,
    QLinearSoftmax,
    QLinearWhere,
    QuantizeLinear,
)
from sonnx.autograd.contrib_quant import GatherBlockQuantized, MatMulNBits
from sonnx.autograd.contrib_quant_integer import DynamicQuantizeMatMul, MatMulIntegerToFloat
from sonnx.onnx.registry import register_operator

for _cls in (
    DequantizeLinear,
    DynamicQuantizeMatMul,
    FusedConv,
    FusedGemm,
    FusedMatMul,
    GatherBlockQuantized,
    MatMulIntegerToFloat,
    MatMulNBits,
    NhwcConv,
    QGemm,
    QLinearAdd,
    QLinearAveragePool,
    QLinearConcat,
    QLinearGlobalAveragePool,
    QLinearLeakyRelu,
    QLinearMul,
    QLinearSigmoid,
    QLinearSoftmax,
    QLinearWhere,
    QuantizeLinear,
):
    register_operator(_cls, 1, domain="com.microsoft")
