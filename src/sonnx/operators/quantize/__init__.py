"""The quantization operators: ONNX's QuantizeLinear, DequantizeLinear and
DynamicQuantizeLinear (``linear``), QLinearConv (``qlinear_conv``), and onnxruntime's
com.microsoft integer products and QLinear operators (``contrib_*``).
"""

from sonnx.engine.operator import Operator
from sonnx.operators.quantize import (
    contrib_integer,
    contrib_nbits,
    contrib_qlinear,
    linear,
    qlinear_conv,
)

#: The classes the importer registers as their own converters, at their since-versions
#: (see :func:`sonnx.onnx.registry.register_operators`).
OPERATORS: tuple[type[Operator], ...] = (
    linear.QuantizeLinear,
    linear.DequantizeLinear,
    linear.DynamicQuantizeLinear,
    qlinear_conv.QLinearConv,
    contrib_integer.DynamicQuantizeMatMul,
    contrib_integer.MatMulIntegerToFloat,
    contrib_nbits.GatherBlockQuantized,
    contrib_nbits.MatMulNBits,
    contrib_qlinear.DequantizeLinear,
    contrib_qlinear.QuantizeLinear,
    contrib_qlinear.QGemm,
    contrib_qlinear.QLinearAdd,
    contrib_qlinear.QLinearAveragePool,
    contrib_qlinear.QLinearConcat,
    contrib_qlinear.QLinearGlobalAveragePool,
    contrib_qlinear.QLinearLeakyRelu,
    contrib_qlinear.QLinearMul,
    contrib_qlinear.QLinearSigmoid,
    contrib_qlinear.QLinearSoftmax,
    contrib_qlinear.QLinearWhere,
)
