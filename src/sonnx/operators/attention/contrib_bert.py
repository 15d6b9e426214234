"""com.microsoft Attention (BERT-style, fused QKV projection), QAttention, MultiHeadAttention.

All three follow onnxruntime's CPU kernels: scores are ``scale * Q K^T`` (scale defaults to
``1 / sqrt(head size)``) plus an additive mask plus ``attention_bias``, then a softmax. The mask
is built as the CPU kernel's ``PrepareMask`` does: a masked key adds ``mask_filter_value``
(default -10000, not -inf, so a fully masked row averages every value), and with
``unidirectional`` a future key adds ``mask_filter_value`` once more (so a row whose keys
are all padding still weighs the past above the future). Query row ``s`` sits at
position ``past length + s`` for the causal rule.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch

from sonnx.engine.operator import OutputShape
from sonnx.errors import BadInputError, UnsupportedOperatorError
from sonnx.operators.contrib import ContribOperator
from sonnx.operators.quantize.linear import DynamicQuantizeLinear
from sonnx.operators.quantize.ort_qlinear import QLinearKernel
from sonnx.operators.quantize.straight_through import straight_through

__all__ = ["Attention", "MultiHeadAttention", "QAttention"]

MASK_FILTER_VALUE = -10000.0


def _heads_first(x: torch.Tensor, heads: int) -> torch.Tensor:
    """(batch, seq, heads * size) -> (batch, heads, seq, size)."""
    return x.reshape(x.shape[0], x.shape[1], heads, -1).transpose(1, 2)


def _key_mask(
    op: ContribOperator, mask: torch.Tensor, batch: int, q_len: int, kv_len: int
) -> torch.Tensor:
    """An additive (batch or 1, 1, q, kv) mask from a mask input in the kernel's forms.

    (batch): keys at or past each length are masked (right padding); (2 * batch): end
    positions then start positions (left padding); (batch, kv) or (batch, q, kv): 0 masks.
    """
    filler = float(op.attr("mask_filter_value"))
    keys = torch.arange(kv_len, device=mask.device)
    if mask.dim() == 1 and mask.shape[0] in (batch, 2 * batch):
        end = mask[:batch].long().reshape(batch, 1)
        masked = keys >= end
        if mask.shape[0] == 2 * batch:
            masked = masked | (keys < mask[batch:].long().reshape(batch, 1))
        masked = masked.reshape(batch, 1, 1, kv_len)
    elif mask.dim() == 2 and tuple(mask.shape) == (batch, kv_len):
        masked = (mask <= 0).reshape(batch, 1, 1, kv_len)
    elif mask.dim() == 3 and tuple(mask.shape) == (batch, q_len, kv_len):
        masked = (mask <= 0).reshape(batch, 1, q_len, kv_len)
    else:
        raise BadInputError(
            f"{op.label()}: the mask must be (batch,) lengths, (2 * batch,) end and start "
            f"positions, (batch, {kv_len}) or (batch, {q_len}, {kv_len}) with batch {batch}, "
            f"received shape {tuple(mask.shape)}"
        )
    zero = torch.zeros((), device=mask.device)
    return torch.where(masked, torch.full((), filler, device=mask.device), zero)


def _attend(
    op: ContribOperator,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    attention_bias: torch.Tensor | None,
    past: int,
) -> torch.Tensor:
    """Attention of (batch, heads, q, size) queries over (batch, heads, kv, size) keys and
    values (the first ``past`` of them from the cache) with the kernel's additive masks;
    returns (batch, q, heads * v size)."""
    batch, _, q_len, size = q.shape
    kv_len = k.shape[2]
    scale = float(op.attr("scale")) or 1 / math.sqrt(size)
    scores = torch.matmul(q, k.transpose(2, 3)) * scale
    if mask is not None:
        scores = scores + _key_mask(op, mask, batch, q_len, kv_len).to(scores.dtype)
    if op.attr("unidirectional"):
        rows = torch.arange(q_len, device=q.device).reshape(-1, 1) + past
        future = torch.arange(kv_len, device=q.device) > rows
        scores = scores + future.to(scores.dtype) * float(op.attr("mask_filter_value"))
    if attention_bias is not None:
        scores = scores + attention_bias
    out = torch.matmul(torch.softmax(scores, -1), v)
    return out.transpose(1, 2).reshape(batch, q_len, -1)


class MultiHeadAttention(ContribOperator):
    """com.microsoft MultiHeadAttention on the CPU: separate Q (batch, seq, hidden) and K, V
    (batch, kv seq, hidden) or already split (batch, heads, kv seq, size); an optional
    ``bias`` (Q, K and V biases concatenated); key_padding_mask, attention_bias and
    past/present key and value (BNSH)."""

    op_type = "MultiHeadAttention"
    since_versions = (1,)
    defaults: ClassVar[dict[str, Any]] = {
        "mask_filter_value": MASK_FILTER_VALUE,
        "scale": 0.0,
        "unidirectional": 0,
    }
    output_shape = OutputShape.FROM_SHAPES

    def forward(self, *xs: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
        xs = tuple(xs) + (None,) * (10 - len(xs))
        query, key, value, bias, key_padding_mask, attention_bias, past_k, past_v = xs[:8]
        if xs[8] is not None or xs[9] is not None:
            raise UnsupportedOperatorError(
                f"{self.label()}: past_sequence_length and cache_indirection (beam search "
                "buffers) are not supported"
            )
        heads = int(self.attr("num_heads"))
        if query.dim() != 3 or key is None or query.shape[2] % heads:
            raise BadInputError(
                f"{self.label()}: needs query (batch, seq, hidden) with hidden divisible by "
                f"num_heads={heads}, and a key; received query {tuple(query.shape)}, key "
                f"{None if key is None else tuple(key.shape)} (packed QKV is not supported)"
            )
        hidden = query.shape[2]
        if bias is not None:
            query = query + bias[:hidden]
        q = _heads_first(query, heads)
        k, v = self._keys_values(key, value, bias, heads, hidden)
        past = 0
        if past_k is not None and past_v is not None:
            k, v = torch.cat([past_k, k], 2), torch.cat([past_v, v], 2)
            past = past_k.shape[2]
        if self.attr("unidirectional") and k.shape[2] != past + q.shape[2]:
            # onnxruntime's CPU kernel masks no key at all on some rows here.
            raise UnsupportedOperatorError(
                f"{self.label()}: unidirectional cross-attention (kv length {k.shape[2]} != "
                f"past {past} + query length {q.shape[2]}) is not supported"
            )
        out = _attend(self, q, k, v, key_padding_mask, attention_bias, past)
        return out, k, v

    def _keys_values(
        self,
        key: torch.Tensor,
        value: torch.Tensor | None,
        bias: torch.Tensor | None,
        heads: int,
        hidden: int,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V as (batch, heads, kv seq, size), biases added."""
        if value is None:
            raise UnsupportedOperatorError(
                f"{self.label()}: packed KV (value absent) is not supported (onnxruntime's CPU "
                "kernel does not run it either)"
            )
        if key.dim() == 4:  # already (batch, heads, kv seq, size): no projection bias
            return key, value
        if bias is not None:
            key = key + bias[hidden : 2 * hidden]
            value = value + bias[2 * hidden :]
        return _heads_first(key, heads), _heads_first(value, heads)


class Attention(ContribOperator):
    """com.microsoft Attention (BERT-style): Q, K and V projected by one ``weights`` matrix
    (input hidden, Q + K + V hidden sizes) plus ``bias``; mask_index in the CPU kernel's
    forms; past (2, batch, heads, past, size) and present (2, batch, heads, past + seq,
    size); attention_bias."""

    op_type = "Attention"
    since_versions = (1,)
    defaults: ClassVar[dict[str, Any]] = {
        "do_rotary": 0,
        "mask_filter_value": MASK_FILTER_VALUE,
        "past_present_share_buffer": 0,
        "qkv_hidden_sizes": None,
        "rotary_embedding_dim": 0,
        "scale": 0.0,
        "unidirectional": 0,
    }
    output_shape = OutputShape.FROM_SHAPES

    def forward(self, *xs: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
        xs = tuple(xs) + (None,) * (7 - len(xs))
        x, weights, bias, mask_index, past, attention_bias, shared_length = xs
        self.require({"weights": weights})
        self._refuse_unsupported(shared_length)
        qkv = torch.matmul(x, weights)
        if bias is not None:
            qkv = qkv + bias
        return self._attend_projected(qkv, weights, mask_index, past, attention_bias)

    def _refuse_unsupported(self, shared_length: torch.Tensor | None) -> None:
        if self.attr("do_rotary") or self.attr("past_present_share_buffer") or shared_length:
            raise UnsupportedOperatorError(
                f"{self.label()}: do_rotary and past/present buffer sharing are not supported "
                "(onnxruntime's CPU kernel runs neither)"
            )

    def _attend_projected(
        self,
        qkv: torch.Tensor,
        weights: torch.Tensor,
        mask_index: torch.Tensor | None,
        past: torch.Tensor | None,
        attention_bias: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Output and present from the projected Q, K and V (batch, seq, Q + K + V hidden)."""
        heads = int(self.attr("num_heads"))
        sizes = self._hidden_sizes(weights, heads)
        q, k, v = (_heads_first(t, heads) for t in qkv.split(sizes, -1))
        if past is not None:
            k, v = torch.cat([past[0], k], 2), torch.cat([past[1], v], 2)
        past_length = 0 if past is None else past.shape[3]
        out = _attend(self, q, k, v, mask_index, attention_bias, past_length)
        # Present exists only where K and V share one size (always so with a past).
        return out, torch.stack([k, v]) if k.shape == v.shape else None

    def _hidden_sizes(self, weights: torch.Tensor, heads: int) -> list[int]:
        given = self.attr("qkv_hidden_sizes")
        sizes = list(given) if given else [weights.shape[1] // 3] * 3
        if sum(sizes) != weights.shape[1] or any(s <= 0 or s % heads for s in sizes):
            raise BadInputError(
                f"{self.label()}: Q, K and V hidden sizes {sizes} must be positive multiples "
                f"of num_heads={heads} summing to the weights' second dim, received weights "
                f"{tuple(weights.shape)}"
            )
        return sizes


class QAttention(QLinearKernel, Attention):
    """com.microsoft QAttention: Attention whose input and weights are 8-bit integers.

    The projection is the CPU kernel's: the exact integer product of ``input - input_zero_point``
    and ``weight - weight_zero_point``, times ``input_scale * weight_scale`` (per tensor, or per
    output column), plus ``bias``; the rest is :class:`Attention`'s.

    On the CPU without a gradient, a node whose weight, bias and their scale and zero point are
    the model's constants runs onnxruntime's own kernel (7-25x faster than this path at
    BERT-base sizes, :mod:`sonnx.operators.quantize.ort_qlinear`) where it asks no present
    state and has no past; :meth:`forward_float_input` (training) stays on torch.
    """

    op_type = "QAttention"
    since_versions = (1,)
    # The scales and zero points parameterise the dequantization.
    parameterising_inputs = frozenset({3, 4, 6, 7})

    def forward(self, *xs: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
        xs = tuple(xs) + (None,) * (9 - len(xs))
        x, weight, bias, x_scale, w_scale, mask_index, x_zero, w_zero, past = xs
        self.require({"weight": weight, "bias": bias, "input_scale": x_scale,
                      "weight_scale": w_scale})  # fmt: skip
        y = self.onnxruntime_node(xs, self._kernel_fits(xs))
        if y is not None:
            return y, None
        qkv = self._project(x, weight, bias, x_scale, w_scale, x_zero, w_zero)
        return self._attend_projected(qkv, weight, mask_index, past, None)

    def _kernel_fits(self, xs: tuple[torch.Tensor | None, ...]) -> bool:
        """One output asked (no present), no past, Q, K and V of one size, a 3-D input of
        the weight's rows, per-tensor input quantization and a mask of int32 lengths or
        flags (onnxruntime's kernel reads no other)."""
        x, weight, _, x_scale, _, mask_index, x_zero, _, past = xs
        return (
            self.requested_outputs == 1
            and past is None
            and not self.attr("qkv_hidden_sizes")
            and x.dim() == 3
            and weight.dim() == 2
            and x.shape[2] == weight.shape[0]
            and weight.shape[1] % 3 == 0
            and x_scale.numel() == 1
            and (x_zero is None or x_zero.numel() == 1)
            and (mask_index is None or mask_index.dtype == torch.int32)
        )

    def forward_float_input(self, x: torch.Tensor, *xs: torch.Tensor | None) -> torch.Tensor:
        """The output of this node fed by a DynamicQuantizeLinear of the float ``x`` (what
        ``quantize_dynamic`` writes), its other inputs ``xs`` those of :meth:`forward` without
        the input, its scale and its zero point: weight, bias, weight_scale, mask_index,
        weight_zero_point, past.

        Equal to the two nodes bit for bit; differentiable in ``x`` by the straight-through
        estimator (the input's rounding passes the gradient as if it were not rounded, through
        the dequantized weight), so the float layers before an int8 attention train. The
        fusion of the two nodes (:mod:`sonnx.runtime.quantized_fusions`) calls it.

        :param x: the float input (batch, sequence, input hidden).
        :param xs: weight, bias, weight_scale, mask_index, weight_zero_point, past.
        :returns: the attention output (batch, sequence, V hidden).
        """
        weight, bias, w_scale, mask_index, w_zero, past = tuple(xs) + (None,) * (6 - len(xs))
        self.require({"weight": weight, "bias": bias, "weight_scale": w_scale})
        qx, x_scale, x_zero = DynamicQuantizeLinear().forward(x)
        qkv = self._project(qx, weight, bias, x_scale, w_scale, x_zero, w_zero)
        qkv = straight_through(x, qkv, weight, w_scale, w_zero)
        return self._attend_projected(qkv, weight, mask_index, past, None)[0]

    def _project(
        self,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor,
        x_scale: torch.Tensor,
        w_scale: torch.Tensor,
        x_zero: torch.Tensor | None,
        w_zero: torch.Tensor | None,
    ) -> torch.Tensor:
        """Q, K and V projected from the quantized input, as the CPU kernel computes them."""
        self._refuse_unsupported(None)
        x_shifted = x.double() - (0 if x_zero is None else x_zero.double())
        w_shifted = weight.double() - (0 if w_zero is None else w_zero.double())
        # Exact integer sums (float64 holds them), then scaled in float32 as the kernel does.
        product = torch.matmul(x_shifted, w_shifted).to(bias.dtype)
        return product * (x_scale * w_scale).to(bias.dtype) + bias
