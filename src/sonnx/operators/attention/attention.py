"""Attention blocks: Attention and RotaryEmbedding (opset 23+).

Attention follows the ONNX reference step by step (scale split as sqrt(scale) on Q and K,
softcap before the mask, bottom-right causal alignment, fully-masked rows giving zeros) using
torch ops, so its gradients with respect to Q, K and V come from torch autograd. The newer
state-space style operators (LinearAttention, CausalConvWithState) live in
:mod:`sonnx.operators.attention.linear` and are re-exported here.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import torch

from sonnx import dtypes
from sonnx.engine.operator import Operator, OutputShape
from sonnx.errors import BadInputError, ExportError, OpsetTooOldError
from sonnx.operators.attention.linear import (
    CausalConvWithState,
    LinearAttention,
    causal_conv_with_state,
    linear_attention,
)
from sonnx.tensor import Tensor

if TYPE_CHECKING:
    from sonnx.proto.graph_builder import GraphBuilder

__all__ = [
    "Attention",
    "CausalConvWithState",
    "LinearAttention",
    "RotaryEmbedding",
    "attention",
    "causal_conv_with_state",
    "linear_attention",
    "rotary_embedding",
]


def _split_heads(x: torch.Tensor, heads: int, name: str) -> torch.Tensor:
    """(batch, seq, heads * size) -> (batch, heads, seq, size)."""
    if x.shape[2] % heads:
        raise BadInputError(
            f"Attention: input {name} hidden size {x.shape[2]} is not divisible by its "
            f"{heads} heads"
        )
    return x.reshape(x.shape[0], x.shape[1], heads, x.shape[2] // heads).transpose(1, 2)


def _allowed_bias(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """An additive bias: 0 where ``allowed``, -inf elsewhere (select, never multiply)."""
    return torch.where(
        allowed,
        torch.zeros((), dtype=dtype, device=allowed.device),
        torch.full((), -math.inf, dtype=dtype, device=allowed.device),
    )


def _position_offsets(
    q_len: int, kv_len: int, offset: int | torch.Tensor, device: torch.device
) -> torch.Tensor:
    """``(i + offset) - j`` for query i and key j: (q, kv), or (batch, 1, q, kv) per batch."""
    i = torch.arange(q_len, device=device).reshape(q_len, 1)
    j = torch.arange(kv_len, device=device).reshape(1, kv_len)
    if isinstance(offset, torch.Tensor):
        return (i + offset.reshape(-1, 1, 1, 1)) - j
    return (i + offset) - j


def _softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last axis, computed in the precision of ``x``.

    In float16 and bfloat16 every step (subtract the max, exp, sum, divide) is rounded to that
    type as in ONNX's reference, rather than torch's float32-internal softmax, so results
    agree with it to the last bit. A bfloat16 sum is accumulated key by key in bfloat16 (the
    reference's NumPy reduction does so); float16 sums accumulate in float32 like NumPy's.
    """
    if x.dtype not in (torch.float16, torch.bfloat16):
        return torch.softmax(x, -1)
    e = torch.exp(x - x.amax(-1, keepdim=True))
    if x.dtype == torch.bfloat16:
        total = e[..., :1]
        for j in range(1, e.shape[-1]):
            total = total + e[..., j : j + 1]
    else:
        total = e.sum(-1, keepdim=True)
    return e / total


class Attention(Operator):
    """ONNX Attention (23, 24, 25): scaled dot-product attention with masks and a KV cache.

    Inputs ``(Q, K, V, attn_mask, past_key, past_value, nonpad_kv_seqlen)``; outputs
    ``(Y, present_key, present_value, qk_matmul_output)``. Q, K and V are 4-D
    (batch, heads, seq, head size) or 3-D (batch, seq, hidden) with q_num_heads/kv_num_heads.
    """

    op_type = "Attention"
    since_versions = (23, 24, 25)
    output_shape = OutputShape.FROM_SHAPES
    # The mask and the key lengths are data of each call.
    parameterising_inputs = frozenset()

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        past_key: torch.Tensor | None = None,
        past_value: torch.Tensor | None = None,
        nonpad_kv_seqlen: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, ...]:
        rank = q.dim()
        if rank not in (3, 4) or k.dim() != rank or v.dim() != rank:
            raise BadInputError(
                "Attention: inputs Q, K and V must all be 3-D (batch, seq, hidden) or all 4-D "
                f"(batch, heads, seq, head size), received shapes {tuple(q.shape)}, "
                f"{tuple(k.shape)}, {tuple(v.shape)}"
            )
        if (past_key is None) != (past_value is None):
            raise BadInputError("Attention: past_key and past_value must be given together")
        if nonpad_kv_seqlen is not None and past_key is not None:
            raise BadInputError("Attention: nonpad_kv_seqlen cannot be combined with past_key")
        if rank == 3:
            q_heads, kv_heads = self.attr("q_num_heads"), self.attr("kv_num_heads")
            if not q_heads or not kv_heads:
                raise BadInputError(
                    "Attention: 3-D inputs need the attributes q_num_heads and kv_num_heads, "
                    f"received {q_heads} and {kv_heads}"
                )
            q = _split_heads(q, q_heads, "Q")
            k = _split_heads(k, kv_heads, "K")
            v = _split_heads(v, kv_heads, "V")
        if past_key is not None:
            k = torch.cat([past_key, k], 2)
            v = torch.cat([past_value, v], 2)
        present_key, present_value = k, v
        self._check_heads(q, k, v)
        bias = self._bias(q, k, attn_mask, past_key, nonpad_kv_seqlen)
        if q.shape[1] != k.shape[1]:  # grouped-query: each KV head serves consecutive Q heads
            k = k.repeat_interleave(q.shape[1] // k.shape[1], 1)
            v = v.repeat_interleave(q.shape[1] // v.shape[1], 1)
        scale = self.attr("scale")
        scale = 1 / math.sqrt(q.shape[3]) if scale is None else float(scale)
        root = torch.tensor(math.sqrt(scale), dtype=q.dtype, device=q.device)
        scores = torch.matmul(q * root, (k * root).transpose(-1, -2))
        softcap = self.attr("softcap")
        if softcap:
            scores = torch.tanh(scores / softcap) * softcap
        biased = scores + bias
        mode = self.attr("qk_matmul_output_mode")
        debug = biased if mode == 2 else scores
        precision = self.attr("softmax_precision")
        logits = biased.to(dtypes.onnx_to_torch(precision)) if precision else biased
        # A row whose bias is all -inf attends nothing and yields zeros. Its logits are
        # replaced before the softmax so that neither the value nor the gradient is NaN.
        masked_row = torch.isneginf(bias.amax(-1, keepdim=True)) if bias.numel() else None
        if masked_row is not None:
            logits = torch.where(
                masked_row, torch.zeros((), dtype=logits.dtype, device=logits.device), logits
            )
        probs = _softmax(logits)
        if masked_row is not None:
            probs = torch.where(
                masked_row, torch.zeros((), dtype=probs.dtype, device=probs.device), probs
            )
        probs = probs.to(q.dtype)
        if mode == 3:
            debug = probs
        y = torch.matmul(probs, v)
        if rank == 3:
            y = y.transpose(1, 2).reshape(y.shape[0], y.shape[2], -1)
        return y, present_key, present_value, debug.to(q.dtype)

    @staticmethod
    def _check_heads(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        if (
            k.shape[1] != v.shape[1]
            or q.shape[1] % k.shape[1]
            or q.shape[0] != k.shape[0]
            or k.shape[2] != v.shape[2]
            or q.shape[3] != k.shape[3]
        ):
            raise BadInputError(
                "Attention: expected Q (B, Hq, Sq, D), K (B, Hkv, Skv, D) and V (B, Hkv, Skv, Dv) "
                "with Hq a multiple of Hkv, received (after the cache) shapes "
                f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
            )

    def _bias(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        attn_mask: torch.Tensor | None,
        past_key: torch.Tensor | None,
        nonpad_kv_seqlen: torch.Tensor | None,
    ) -> torch.Tensor:
        """The additive bias from the mask, causality, the sliding window and the padding."""
        q_len, kv_len, dtype = q.shape[2], k.shape[2], q.dtype
        bias = torch.zeros((q_len, kv_len), dtype=dtype, device=q.device)
        if attn_mask is not None:
            pad = kv_len - attn_mask.shape[-1]
            if pad < 0:
                raise BadInputError(
                    f"Attention: attn_mask's last axis ({attn_mask.shape[-1]}) is longer than "
                    f"the key sequence ({kv_len})"
                )
            if pad:
                fill = False if attn_mask.dtype == torch.bool else -math.inf
                attn_mask = torch.nn.functional.pad(attn_mask, (0, pad), value=fill)
            if attn_mask.dtype == torch.bool:
                attn_mask = _allowed_bias(attn_mask, dtype)
            bias = bias + attn_mask.to(dtype)
        if nonpad_kv_seqlen is not None:
            offset: int | torch.Tensor = nonpad_kv_seqlen.to(q.device) - q_len
        else:
            offset = 0 if past_key is None else past_key.shape[2]
        distance = None
        if self.attr("is_causal"):
            distance = _position_offsets(q_len, kv_len, offset, q.device)
            bias = bias + _allowed_bias(distance >= 0, dtype)
        left = self.attr("left_window_size")
        right = self.attr("right_window_size")
        left = -1 if left is None else left
        right = -1 if right is None else right
        if left >= 0 or right >= 0:
            if distance is None:
                distance = _position_offsets(q_len, kv_len, offset, q.device)
            allowed = torch.ones_like(distance, dtype=torch.bool)
            if left >= 0:
                allowed &= distance <= left
            if right >= 0:
                allowed &= -distance <= right
            bias = bias + _allowed_bias(allowed, dtype)
        if nonpad_kv_seqlen is not None:
            keys = torch.arange(kv_len, device=q.device)
            valid = keys < nonpad_kv_seqlen.to(q.device).reshape(-1, 1)
            bias = bias + _allowed_bias(valid, dtype).reshape(-1, 1, 1, kv_len)
        return bias

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        windowed = any(
            self.attr(name) not in (None, -1) for name in ("left_window_size", "right_window_size")
        )
        external_cache = len(inputs) > 6 and inputs[6] != ""
        needed = 25 if windowed else 24 if external_cache else 23
        if g.opset >= needed:
            g.add_node("Attention", inputs, outputs, **self.export_attrs(g))
        elif needed == 23:
            _export_decomposed(self, g, inputs, outputs)
        else:
            raise OpsetTooOldError(
                f"Attention: {self!r} needs opset {needed} (nonpad_kv_seqlen needs 24, window "
                f"sizes 25), cannot write it at opset {g.opset}",
                needed,
            )


def _export_decomposed(
    op: Attention, g: GraphBuilder, inputs: list[str], outputs: list[str]
) -> None:
    """Attention before opset 23 as MatMul/Softmax nodes (the recorded call's semantics).

    Sequence lengths of a causal mask are those of the recorded call, and a fully-masked row
    gives NaN rather than zeros (as in most pre-23 exports of attention).
    """
    q_in, k_in, v_in = op.inputs[:3]
    mask_in = op.inputs[3] if len(op.inputs) > 3 else None
    past_in = op.inputs[4] if len(op.inputs) > 4 else None
    np_dtype = dtypes.torch_to_numpy(q_in.dtype)
    ins = list(inputs) + [""] * (6 - len(inputs))
    q, k, v, mask, past_k, past_v = ins[:6]

    def node(op_type: str, args: list[str], **attrs: object) -> str:
        out = g.fresh_name(f"attention_{op_type.lower()}")
        g.add_node(op_type, args, [out], **attrs)
        return out

    def ints(values: list[int]) -> str:
        return g.constant(np.asarray(values, np.int64), "attention_shape")

    def value(x: float) -> str:
        return g.constant(np.asarray(x, np_dtype), "attention_value")

    rank = q_in.ndim()
    if rank == 3:
        heads_q, heads_kv = int(op.attr("q_num_heads")), int(op.attr("kv_num_heads"))
        size_q, size_v = q_in.shape[2] // heads_q, v_in.shape[2] // heads_kv
        q, k, v = (
            node("Transpose", [node("Reshape", [x, ints([0, 0, h, -1])])], perm=[0, 2, 1, 3])
            for x, h in ((q, heads_q), (k, heads_kv), (v, heads_kv))
        )
    else:
        heads_q, heads_kv, size_q, size_v = (
            q_in.shape[1],
            k_in.shape[1],
            q_in.shape[3],
            v_in.shape[3],
        )
    if past_k:
        k = node("Concat", [past_k, k], axis=2)
        v = node("Concat", [past_v, v], axis=2)
    g.add_node("Identity", [k], [outputs[1]])
    g.add_node("Identity", [v], [outputs[2]])
    if heads_q != heads_kv:
        repeat = heads_q // heads_kv

        def unsqueeze(x: str) -> str:  # axes became an input at opset 13
            if g.opset >= 13:
                return node("Unsqueeze", [x, ints([2])])
            return node("Unsqueeze", [x], axes=[2])

        k, v = (
            node(
                "Reshape",
                [
                    node("Expand", [unsqueeze(x), ints([1, 1, repeat, 1, 1])]),
                    ints([0, heads_q, -1, d]),
                ],
            )
            for x, d in ((k, size_q), (v, size_v))
        )
    scale = op.attr("scale")
    root = value(math.sqrt(1 / math.sqrt(size_q) if scale is None else float(scale)))
    k_t = node("Transpose", [node("Mul", [k, root])], perm=[0, 1, 3, 2])
    scores = node("MatMul", [node("Mul", [q, root]), k_t])
    if op.attr("softcap"):
        cap = value(float(op.attr("softcap")))
        scores = node("Mul", [node("Tanh", [node("Div", [scores, cap])]), cap])
    biased = scores
    if mask:
        kv_len = k_in.shape[1 if rank == 3 else 2] + (0 if past_in is None else past_in.shape[2])
        if mask_in.shape[-1] != kv_len:
            raise ExportError(
                f"Attention: before opset 23 attn_mask must cover all {kv_len} keys, "
                f"received mask shape {mask_in.shape}"
            )
        if mask_in.dtype == torch.bool:
            mask = node("Where", [mask, value(0.0), value(-math.inf)])
        biased = node("Add", [biased, mask])
    if op.attr("is_causal"):
        q_len = q_in.shape[1 if rank == 3 else 2]
        offset = 0 if past_in is None else past_in.shape[2]
        kv_len = k_in.shape[1 if rank == 3 else 2] + offset
        allowed = np.arange(kv_len)[None, :] <= np.arange(q_len)[:, None] + offset
        causal = np.where(allowed, 0.0, -np.inf).astype(np_dtype)
        biased = node("Add", [biased, g.constant(causal, "attention_causal")])
    logits = biased
    precision = op.attr("softmax_precision")
    if precision:
        logits = node("Cast", [logits], to=int(precision))
    probs = node("Softmax", [logits], axis=-1)
    if precision:
        probs = node("Cast", [probs], to=dtypes.torch_to_onnx(q_in.dtype))
    y = node("MatMul", [probs, v])
    if rank == 3:
        y = node("Reshape", [node("Transpose", [y], perm=[0, 2, 1, 3]), ints([0, 0, -1])])
    g.add_node("Identity", [y], [outputs[0]])
    mode = op.attr("qk_matmul_output_mode")
    g.add_node("Identity", [{2: biased, 3: probs}.get(mode, scores)], [outputs[3]])


class RotaryEmbedding(Operator):
    """ONNX RotaryEmbedding (23): rotate pairs of features by position-dependent angles.

    ``X`` is (batch, heads, seq, head size) or (batch, seq, hidden) with ``num_heads``;
    ``cos_cache``/``sin_cache`` are (max position, rotary dim / 2) indexed by ``position_ids``,
    or already (batch, seq, rotary dim / 2) when ``position_ids`` is absent.
    """

    op_type = "RotaryEmbedding"
    since_versions = (23,)
    output_shape = OutputShape.FROM_SHAPES
    # The cos and sin caches are fixed tables; position_ids are data.
    parameterising_inputs = frozenset({1, 2})

    def forward(
        self,
        x: torch.Tensor,
        cos_cache: torch.Tensor,
        sin_cache: torch.Tensor,
        position_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if x.dim() == 4:
            work = x.transpose(1, 2)  # (batch, seq, heads, size)
        elif x.dim() == 3:
            heads = self.attr("num_heads")
            if not heads or x.shape[2] % heads:
                raise BadInputError(
                    "RotaryEmbedding: a 3-D input needs num_heads dividing its hidden size "
                    f"{x.shape[2]}, received num_heads={heads}"
                )
            work = x.reshape(x.shape[0], x.shape[1], heads, x.shape[2] // heads)
        else:
            raise BadInputError(
                "RotaryEmbedding: input X must be 3-D (batch, seq, hidden) or 4-D (batch, heads, "
                f"seq, head size), received shape {tuple(x.shape)}"
            )
        dim = int(self.attr("rotary_embedding_dim") or 0) or work.shape[3]
        if position_ids is not None:
            cos_cache = cos_cache[position_ids.long()]
            sin_cache = sin_cache[position_ids.long()]
        if cos_cache.shape[-1] != dim // 2 or sin_cache.shape[-1] != dim // 2:
            raise BadInputError(
                f"RotaryEmbedding: cos_cache and sin_cache must end in rotary dim / 2 = "
                f"{dim // 2}, received shapes {tuple(cos_cache.shape)} and "
                f"{tuple(sin_cache.shape)}"
            )
        cos = cos_cache.unsqueeze(2).to(x.dtype)
        sin = sin_cache.unsqueeze(2).to(x.dtype)
        rotate, keep = work[..., :dim], work[..., dim:]
        if self.attr("interleaved"):
            x1, x2 = rotate[..., 0::2], rotate[..., 1::2]
        else:
            x1, x2 = rotate[..., : dim // 2], rotate[..., dim // 2 :]
        real = cos * x1 - sin * x2
        imag = sin * x1 + cos * x2
        if self.attr("interleaved"):
            rotated = torch.stack([real, imag], -1).reshape(rotate.shape)
        else:
            rotated = torch.cat([real, imag], -1)
        out = torch.cat([rotated, keep], -1)
        return out.reshape(x.shape) if x.dim() == 3 else out.transpose(1, 2)


def attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    num_heads: int | None = None,
    kv_num_heads: int | None = None,
) -> Tensor:
    """Scaled dot-product attention ``softmax(q k^T * scale + mask) v`` (ONNX Attention).

    ``q``, ``k``, ``v`` are 4-D (batch, heads, seq, head size), or 3-D (batch, seq, hidden) with
    ``num_heads`` (and ``kv_num_heads`` for grouped-query attention, default ``num_heads``).
    ``mask`` is boolean (True attends) or additive, broadcastable to (batch, heads, q, kv).

    :param q: the queries.
    :param k: the keys (fewer heads than ``q`` for grouped-query attention).
    :param v: the values, with ``k``'s heads and sequence.
    :param mask: a boolean or additive mask, or None.
    :param is_causal: True masks out keys after each query's position.
    :param scale: the factor on ``q k^T``; None for ``1 / sqrt(head size)``.
    :param num_heads: the query heads of 3-D inputs.
    :param kv_num_heads: the key/value heads of 3-D inputs; None for ``num_heads``.
    :returns: the attention output, shaped as ``q`` (with ``v``'s head size).
    :raises BadInputError: a 3-D ``q`` comes without ``num_heads``, the inputs are not all 3-D
        or all 4-D, or their shapes do not fit.
    """
    attrs: dict[str, object] = {"is_causal": int(is_causal)}
    if scale is not None:
        attrs["scale"] = float(scale)
    if q.ndim() == 3:
        if num_heads is None:
            raise BadInputError(f"attention: 3-D q needs num_heads, received shape {q.shape}")
        attrs["q_num_heads"] = int(num_heads)
        attrs["kv_num_heads"] = int(kv_num_heads or num_heads)
    return Attention(**attrs)(q, k, v, mask)[0]


def rotary_embedding(
    x: Tensor,
    cos_cache: Tensor,
    sin_cache: Tensor,
    position_ids: Tensor | None = None,
    interleaved: bool = False,
    num_heads: int | None = None,
    rotary_embedding_dim: int = 0,
) -> Tensor:
    """Apply rotary position embeddings to ``x`` (ONNX RotaryEmbedding).

    :param x: (batch, heads, seq, head size), or (batch, seq, hidden) with ``num_heads``.
    :param cos_cache: (max position, rotary dim / 2) cosines indexed by ``position_ids``, or
        (batch, seq, rotary dim / 2) when ``position_ids`` is None.
    :param sin_cache: the sines, shaped as ``cos_cache``.
    :param position_ids: the (batch, seq) position of each token, or None.
    :param interleaved: True rotates adjacent feature pairs, False the two halves.
    :param num_heads: the heads of a 3-D ``x``.
    :param rotary_embedding_dim: how many leading features of each head rotate; 0 for all.
    :returns: a tensor of ``x``'s shape and dtype.
    """
    attrs: dict[str, object] = {
        "interleaved": int(interleaved),
        "rotary_embedding_dim": int(rotary_embedding_dim),
    }
    if num_heads is not None:
        attrs["num_heads"] = int(num_heads)
    return RotaryEmbedding(**attrs)(x, cos_cache, sin_cache, position_ids)
