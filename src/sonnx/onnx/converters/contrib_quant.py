"""Importer registrations for com.microsoft products and quantization: see
sonnx.operators.quantize.contrib_nbits, contrib_quant_integer, contrib_fused and contrib_qlinear."""

from sonnx.onnx.registry import register_operators
from sonnx.operators.linalg.contrib_fused import FusedConv, FusedGemm, FusedMatMul, NhwcConv
from sonnx.operators.quantize.contrib_integer import DynamicQuantizeMatMul, MatMulIntegerToFloat
from sonnx.operators.quantize.contrib_nbits import GatherBlockQuantized, MatMulNBits
from sonnx.operators.quantize.contrib_qlinear import (
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

register_operators(
    DequantizeLinear, DynamicQuantizeMatMul, FusedConv, FusedGemm, FusedMatMul,
    GatherBlockQuantized, MatMulIntegerToFloat, MatMulNBits, NhwcConv, QGemm, QLinearAdd,
    QLinearAveragePool, QLinearConcat, QLinearGlobalAveragePool, QLinearLeakyRelu, QLinearMul,
    QLinearSigmoid, QLinearSoftmax, QLinearWhere, QuantizeLinear,
)
