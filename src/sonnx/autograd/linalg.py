"""Linear algebra and scans: MatMul, Gemm, Einsum, Det, CumSum, CumProd and the integer/quantized
matrix products.
"""

__all__: list[str] = []
