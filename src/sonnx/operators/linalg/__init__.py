"""The products: MatMul, Gemm, Einsum, Det, the cumulative ones and the integer products
(``products``), and onnxruntime's fused com.microsoft ones (``contrib_fused``). Gemm-1/6 is
adapted in :mod:`sonnx.onnx.converters.linalg`.
"""

from sonnx.engine.operator import Operator
from sonnx.operators.linalg import contrib_fused, products

#: The classes the importer registers as their own converters, at their since-versions
#: (see :func:`sonnx.onnx.registry.register_operators`).
OPERATORS: tuple[type[Operator], ...] = (
    products.MatMul,
    products.Gemm,
    products.Einsum,
    products.Det,
    products.CumSum,
    products.CumProd,
    products.MatMulInteger,
    products.QLinearMatMul,
    contrib_fused.FusedConv,
    contrib_fused.FusedGemm,
    contrib_fused.FusedMatMul,
    contrib_fused.NhwcConv,
)
