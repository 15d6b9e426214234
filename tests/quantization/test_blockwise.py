"""quantize_blockwise against onnxruntime's C++ kernel (``quantize_matmul_4bits`` /
``quantize_matmul_8bits``, which MatMulNBitsQuantizer calls): the same packed codes, scales and
zero points, byte for byte, on random shapes (odd K, partial blocks), one-signed and all-zero
blocks, values on exact rounding halves, float32 and float16."""

from __future__ import annotations

import numpy as np
import pytest
from onnxruntime.capi._pybind_state import quantize_matmul_4bits, quantize_matmul_8bits

from sonnx.quantization.blockwise import quantize_blockwise


@pytest.mark.parametrize("bits", [4, 8])
def test_blocks_equal_the_kernel(bits: int) -> None:
    rng = np.random.default_rng(bits)
    kernel = quantize_matmul_4bits if bits == 4 else quantize_matmul_8bits
    for trial in range(120):
        rows, cols = int(rng.integers(1, 300)), int(rng.integers(1, 12))
        block, symmetric = int(rng.choice([16, 32, 64, 128, 256])), bool(trial % 2)
        dtype = np.float16 if trial % 3 == 0 else np.float32
        weight = rng.standard_normal((rows, cols)) * 10 ** rng.uniform(-3, 2)
        weight = [weight, np.abs(weight), -np.abs(weight), np.round(weight * 4) / 4][trial % 4]
        weight[rng.random(weight.shape) < 0.2 * (trial % 4 == 3)] = 0
        weight = weight.astype(dtype)
        blocks = -(-rows // block)
        packed = np.zeros((cols, blocks, block * bits // 8), np.uint8)
        zero_points = np.zeros((cols, -(-blocks * bits // 8)), np.uint8)
        scales = np.zeros((cols, blocks), dtype)
        padded = np.pad(weight, ((0, blocks * block - rows), (0, 0)))
        kernel(packed, padded, scales, zero_points, block, cols, rows, symmetric)
        got = quantize_blockwise(weight, bits, block, symmetric)
        case = f"K={rows} N={cols} block={block} symmetric={symmetric} {dtype.__name__}"
        assert got.packed.tobytes() == packed.tobytes(), case
        assert got.scales.dtype == dtype and got.scales.tobytes() == scales.tobytes(), case
        if not symmetric:
            assert got.zero_points.tobytes() == zero_points.tobytes(), case
