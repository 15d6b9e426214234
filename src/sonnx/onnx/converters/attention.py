"""Importer registrations for attention: see sonnx.operators.attention.attention.

FlexAttention (domain ai.onnx.preview) has no operator class: its converter composes standard
recorded operators around its ``score_mod`` / ``prob_mod`` subgraphs, so it exports as them.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from sonnx import dtypes
from sonnx.errors import BadInputError
from sonnx.onnx.registry import NodeInfo, converter
from sonnx.operators.activation.softmax import softmax
from sonnx.operators.elementwise.binary import mul
from sonnx.operators.elementwise.cast import cast
from sonnx.operators.linalg.products import matmul
from sonnx.operators.shape.layout import expand, reshape, transpose, unsqueeze
from sonnx.tensor import Tensor


def _repeat_heads(x: Tensor, times: int) -> Tensor:
    """(B, H, S, D) -> (B, H * times, S, D), each head repeated ``times`` times in a row."""
    b, h, s, d = x.shape
    return reshape(expand(unsqueeze(x, 2), [b, h, times, s, d]), [b, h * times, s, d])


def _cast_to(x: Tensor, dtype: torch.dtype) -> Tensor:
    return x if x.dtype == dtype else cast(x, dtype)


@converter("FlexAttention", 1, domain="ai.onnx.preview")
def flex_attention(node: NodeInfo, inputs: list[Tensor | None], attrs: dict[str, Any]) -> Tensor:
    """FlexAttention (ai.onnx.preview 1) from recorded standard ops and its modifier graphs.

    ``Y = prob_mod(softmax(score_mod(Q K^T * scale))) V`` with the softmax (and the modifiers)
    in ``softmax_precision`` (float32, or float64 for float64 inputs, by default).
    """
    q, k, v = inputs[:3]
    if q is None or k is None or v is None or not q.ndim() == k.ndim() == v.ndim() == 4:
        raise BadInputError(
            f"FlexAttention node {node.name!r}: Q, K and V must be 4-D (batch, heads, seq, "
            f"size), received {[None if t is None else t.shape for t in (q, k, v)]}"
        )
    heads_q, heads_kv = q.shape[1], k.shape[1]
    if v.shape[1] != heads_kv or heads_q % heads_kv:
        raise BadInputError(
            f"FlexAttention node {node.name!r}: K and V heads must match and divide Q's heads, "
            f"received Q {q.shape}, K {k.shape}, V {v.shape}"
        )
    if heads_q != heads_kv:
        k = _repeat_heads(k, heads_q // heads_kv)
        v = _repeat_heads(v, heads_q // heads_kv)
    scale = attrs.get("scale")
    scale = 1 / math.sqrt(q.shape[3]) if scale is None else float(scale)
    # The reference takes sqrt(scale) in float32, rounds it to Q's type and scales Q and K.
    root = torch.tensor(np.sqrt(np.float32(scale)), dtype=q.dtype, device=q.data.device)
    root_t = Tensor(data=root, device=q.device, requires_grad=False)
    scores = matmul(mul(q, root_t), transpose(mul(k, root_t), [0, 1, 3, 2]))
    precision = attrs.get("softmax_precision")
    compute = (
        dtypes.onnx_to_torch(precision)
        if precision
        else torch.float64
        if q.dtype == torch.float64
        else torch.float32
    )
    scores = _cast_to(scores, compute)
    if attrs.get("score_mod") is not None:
        scores = attrs["score_mod"].run([scores])[0]
    probs = softmax(scores, -1)
    if attrs.get("prob_mod") is not None:
        probs = attrs["prob_mod"].run([probs])[0]
    return _cast_to(matmul(probs, _cast_to(v, compute)), v.dtype)
