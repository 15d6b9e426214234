"""Ranges from histograms, as onnxruntime's ``HistogramCollector`` finds them: the
percentile method and the entropy (KL-divergence) method.

onnxruntime's ``quantize_static`` hands its collector every calibration batch at once, so each
tensor's histogram is built in one pass over all the values seen; so is it here. The float32
arithmetic of the edges and the searches is onnxruntime's, so the thresholds are the same
bin edges.
"""

from __future__ import annotations

import numpy as np

__all__ = ["entropy_range", "percentile_range"]


def percentile_range(
    values: np.ndarray, percentile: float, symmetric: bool, num_bins: int = 2048
) -> tuple[np.ndarray, np.ndarray]:
    """The range holding ``percentile`` percent of ``values`` (flat, float32 or float16): with
    ``symmetric``, ``[-t, t]`` where ``t`` is the edge of the histogram of absolute values
    (``num_bins`` bins over ``[0, max |x|]``) below which ``percentile`` percent lie; without,
    both tails cut by half of the rest, over a histogram of ``[-max|x|, max|x|]``. Either
    bound is clipped to the values' own min and max."""
    lo, hi = _min_max(values)
    try:
        if symmetric:
            hist, edges = np.histogram(np.absolute(values), bins=num_bins)
            edges = edges.astype(values.dtype)
        else:
            hist, edges = _signed_histogram(values, num_bins)
    except ValueError:
        # values of one magnitude (a constant mask bias, say): float32 cannot hold num_bins
        # distinct edges around it (onnxruntime fails here); every cut keeps them all
        return lo, hi
    cdf = np.cumsum(hist / hist.sum())
    if symmetric:
        right = edges[np.searchsorted(cdf, percentile / 100.0)]
        low, high = -np.array(right, dtype=edges.dtype), np.array(right, dtype=edges.dtype)
    else:
        cut = (100.0 - percentile) / 200.0
        low = np.array(edges[np.searchsorted(cdf, cut)], dtype=edges.dtype)
        high = np.array(edges[np.searchsorted(cdf, 1.0 - cut)], dtype=edges.dtype)
    return (lo if low < lo else low), (hi if high > hi else high)


def entropy_range(
    values: np.ndarray, num_bins: int = 128, num_quantized_bins: int = 128
) -> tuple[np.ndarray, np.ndarray]:
    """The range, symmetric about 0 before clipping to the values' min and max, whose
    ``num_quantized_bins``-level quantization of the histogram of ``values`` loses the
    least information (KL divergence), trying every width from ``num_quantized_bins`` bins to
    all ``num_bins``. onnxruntime's defaults (128 and 128) leave one candidate: the values'
    own min and max."""
    lo, hi = _min_max(values)
    hist, edges = _signed_histogram(values, num_bins)
    zero_bin = hist.size // 2
    half = num_quantized_bins // 2
    widths = range(half, zero_bin + 1)
    divergences = [
        _kl_divergence(hist, zero_bin - i, min(zero_bin + i + 1, hist.size), num_quantized_bins)
        for i in widths
    ]
    i = widths[int(np.argmin(divergences))]
    best = edges[zero_bin - i], edges[min(zero_bin + i + 1, hist.size)]
    low, high = best
    return (lo if low < lo else low), (hi if high > hi else high)


def _min_max(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if not values.size:
        zero = np.array(0, dtype=values.dtype)
        return zero, zero
    return np.nanmin(values), np.nanmax(values)


def _signed_histogram(values: np.ndarray, num_bins: int) -> tuple[np.ndarray, np.ndarray]:
    lo, hi = _min_max(values)
    threshold = np.array(max(abs(lo), abs(hi)), dtype=values.dtype)
    return np.histogram(values, num_bins, range=(-threshold, threshold))


def _kl_divergence(hist: np.ndarray, start: int, end: int, num_quantized_bins: int) -> float:
    """KL divergence between the histogram cut to ``[start, end)`` (outliers folded into its
    end bins) and that slice merged into ``num_quantized_bins`` bins and spread back."""
    sliced = hist[start:end].copy()
    p = sliced.copy()
    p[0] += hist[:start].sum()
    p[-1] += hist[end:].sum()
    nonzeros = (p != 0).astype(np.int64)
    merged = sliced.size // num_quantized_bins
    quantized = np.array(
        [sliced[k * merged : (k + 1) * merged].sum() for k in range(num_quantized_bins)],
        dtype=np.int64,
    )
    quantized[-1] += sliced[num_quantized_bins * merged :].sum()
    q = np.zeros(p.size, dtype=np.int64)
    for k in range(num_quantized_bins):
        norm = nonzeros[k * merged : (k + 1) * merged].sum()
        if norm:
            q[k * merged : (k + 1) * merged] = quantized[k] / norm
    ps, qs = _smooth(p), _smooth(q)
    if ps is None or qs is None:
        return np.inf
    ps = ps / ps.sum()
    qs = qs / qs.sum()
    terms = np.where((ps > 0) & (qs > 0), ps * np.log(ps / qs), np.inf)
    return float(np.float32(terms.sum()))


def _smooth(p: np.ndarray, eps: float = 0.0001) -> np.ndarray | None:
    """Zeros replaced by ``eps``, taken off the non-zero bins (onnxruntime's
    ``smooth_distribution``); None when every bin is empty."""
    zeros = (p == 0).astype(np.float32)
    n_zeros = zeros.sum()
    n_nonzeros = p.size - n_zeros
    if not n_nonzeros:
        return None
    eps1 = eps * float(n_zeros) / float(n_nonzeros)
    return p.astype(np.float32) + eps * zeros + (-eps1) * (p != 0).astype(np.float32)
