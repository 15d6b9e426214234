"""Block-wise weight quantization for ``com.microsoft`` ``MatMulNBits``, computed as
onnxruntime's MLAS ``BlockwiseQuantizer::quantizeAndTranspose`` computes it (the C++ kernel
behind ``MatMulNBitsQuantizer``'s default algorithm), so that the bytes are the same.

A weight ``W`` of shape ``[K, N]`` is cut along ``K`` into blocks of ``block_size`` rows; each
block of one column gets a scale (and, asymmetric, a zero point). The codes are unsigned
(``0 .. 2**bits - 1``); symmetric blocks use the middle code ``2**(bits - 1)`` as zero.
Everything is float32 arithmetic in the kernel's order: the code of ``v`` is
``clamp(roundf(v * (1 / scale) + zero_point), 0, max)``, ``roundf`` rounding halves away
from zero.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["BlockQuantized", "quantize_blockwise"]


@dataclass(frozen=True)
class BlockQuantized:
    """A weight quantized for MatMulNBits.

    ``packed`` is ``uint8 [N, blocks, block_size * bits / 8]`` (column-major codes, two 4-bit
    codes a byte, low nibble first); ``scales`` is ``[N, blocks]`` in the weight's float type;
    ``zero_points`` is ``uint8 [N, ceil(blocks * bits / 8)]`` (packed as the codes), or None
    for symmetric quantization.
    """

    packed: np.ndarray
    scales: np.ndarray
    zero_points: np.ndarray | None


def _roundf(x: np.ndarray) -> np.ndarray:
    """C's ``roundf``: halves away from zero (NumPy's ``round`` takes them to even).
    ``x - trunc(x)`` is exact in float, so no sum rounds up a value just below a half."""
    whole = np.trunc(x)
    return whole + np.where(np.abs(x - whole) >= 0.5, np.sign(x), 0).astype(x.dtype)


def _scales_and_zero_points(
    blocks: np.ndarray, bits: int, symmetric: bool, dtype: np.dtype
) -> tuple[np.ndarray, np.ndarray]:
    """MLAS ``range2scale`` / ``range2scalezp`` for each block (float32 ``[..., rows]``):
    the scale in the weight's type, and the zero point as a float32 code."""
    top = np.float32(2**bits - 1)
    low, high = blocks.min(axis=-1), blocks.max(axis=-1)
    if symmetric:
        # The larger half of the range maps to the negative codes (-8 .. 0 for 4 bits). A
        # block of zeros keeps the sign of its first zero, as the kernel's running min does.
        low = np.where(low == 0, blocks[..., 0], low)
        extreme = np.where(np.abs(high) > np.abs(low), high, low)
        scale = (-extreme / np.float32(2 ** (bits - 1))).astype(dtype)
        return scale, np.full(scale.shape, 2 ** (bits - 1), np.float32)
    low, high = np.minimum(low, np.float32(0)), np.maximum(high, np.float32(0))
    scale_f = ((high - low) / top).astype(np.float32)
    nonzero = scale_f != 0
    zero_f = np.where(nonzero, -low / np.where(nonzero, scale_f, np.float32(1)), low)
    zero = np.where(zero_f < 0, 0, np.where(zero_f > top, top, _roundf(zero_f)))
    return scale_f.astype(dtype), zero.astype(np.float32)


def _pack(codes: np.ndarray, rows: int, bits: int, thread_rows: int) -> np.ndarray:
    """Codes ``[N, rows_padded]`` (uint8) to bytes along each column, as the kernel writes
    them: bytes past the last row stay 0, and an odd last row's high nibble keeps the code
    of the row two before it when that row is in the same kernel thread block (the kernel
    reuses its pair buffer), else 0."""
    if bits == 8:
        out = codes.copy()
        out[:, rows:] = 0
        return out
    cols, padded = codes.shape
    out = np.zeros((cols, padded // 2), np.uint8)
    pairs = rows // 2
    out[:, :pairs] = codes[:, 0 : 2 * pairs : 2] | (codes[:, 1 : 2 * pairs : 2] << 4)
    if rows % 2:
        last = rows - 1
        stale = codes[:, last - 1] if last % thread_rows else np.zeros(cols, np.uint8)
        out[:, pairs] = codes[:, last] | (stale << 4)
    return out


def _pack_zero_points(zero: np.ndarray, bits: int) -> np.ndarray:
    """Zero points ``[N, blocks]`` packed two a byte for 4 bits; an odd last block's high
    nibble is the kernel's initial 8."""
    zero = zero.astype(np.uint8)
    if bits == 8:
        return zero
    if zero.shape[1] % 2:
        zero = np.concatenate([zero, np.full((zero.shape[0], 1), 8, np.uint8)], axis=1)
    return zero[:, 0::2] | (zero[:, 1::2] << 4)


def quantize_blockwise(
    weight: np.ndarray, bits: int, block_size: int, symmetric: bool
) -> BlockQuantized:
    """Quantize a ``[K, N]`` float32 or float16 weight block-wise along ``K`` for
    MatMulNBits, byte for byte as onnxruntime's ``quantize_matmul_4bits`` /
    ``quantize_matmul_8bits`` do.

    :param weight: the MatMul's constant ``B``, shape ``[K, N]``, float32 or float16.
    :param bits: 4 or 8.
    :param block_size: rows per block (a power of two, at least 16).
    :param symmetric: one scale per block around the middle code; else a scale and a zero
        point per block.
    :returns: the packed codes, scales and (asymmetric) zero points.
    """
    rows, cols = weight.shape
    blocks = -(-rows // block_size)
    padded = blocks * block_size
    # Repeating the last row keeps the last block's min and max; its codes are not written.
    data = np.pad(weight.astype(np.float32), ((0, padded - rows), (0, 0)), mode="edge")
    data = data.T.reshape(cols, blocks, block_size)
    scale, zero = _scales_and_zero_points(data, bits, symmetric, weight.dtype)
    scale_f = scale.astype(np.float32)
    safe = np.where(scale_f != 0, scale_f, np.float32(1))
    reciprocal = np.where(scale_f != 0, np.float32(1) / safe, np.float32(0)).astype(np.float32)
    codes = _roundf(data * reciprocal[..., None] + zero[..., None])
    codes = np.clip(codes, 0, 2**bits - 1).astype(np.uint8).reshape(cols, padded)
    packed = _pack(codes, rows, bits, block_size * (8 // bits))
    return BlockQuantized(
        packed=packed.reshape(cols, blocks, block_size * bits // 8),
        scales=scale,
        zero_points=None if symmetric else _pack_zero_points(zero, bits),
    )
