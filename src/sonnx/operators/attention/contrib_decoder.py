"""com.microsoft DecoderMaskedMultiHeadAttention: one decoding step over a shared KV buffer.

As onnxruntime's CPU kernel runs it (no beam search):

- self-attention (``past_present_share_buffer = 1``): query, key and value are (batch, 1,
  hidden); past_key/past_value are a (batch, heads, max length, size) buffer whose first
  ``past_sequence_length`` rows are valid. The new key and value are written at that row and
  the query attends to rows ``0 .. past_sequence_length``; present_key/present_value are the
  buffer with the new row written.
- cross-attention: key and value are already (batch, heads, kv length, size) and are attended
  as they are (no past, no bias on them).

``mask_index`` (batch, attended length) masks keys where 0 by adding ``mask_filter_value``;
``attention_bias`` is added to the scores.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch

from sonnx.engine.host_values import host
from sonnx.engine.operator import OutputShape
from sonnx.errors import BadInputError, UnsupportedOperatorError
from sonnx.operators.attention.contrib_bert import MASK_FILTER_VALUE
from sonnx.operators.contrib import ContribOperator

__all__ = ["DecoderMaskedMultiHeadAttention"]


class DecoderMaskedMultiHeadAttention(ContribOperator):
    """com.microsoft DecoderMaskedMultiHeadAttention (see the module docstring)."""

    op_type = "DecoderMaskedMultiHeadAttention"
    since_versions = (1,)
    defaults: ClassVar[dict[str, Any]] = {
        "mask_filter_value": MASK_FILTER_VALUE,
        "output_qk": 0,
        "past_present_share_buffer": 0,
        "scale": 0.0,
    }
    output_shape = OutputShape.FROM_SHAPES

    def forward(self, *xs: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
        xs = tuple(xs) + (None,) * (11 - len(xs))
        query, key, value, mask, attention_bias, past_k, past_v, past_length = xs[:8]
        beam_width, cache_indirection, bias = xs[8:]
        if beam_width is not None or cache_indirection is not None or self.attr("output_qk"):
            raise UnsupportedOperatorError(
                f"{self.label()}: beam search (beam_width, cache_indirection) and output_qk "
                "are not supported"
            )
        heads = int(self.attr("num_heads"))
        batch, seq, hidden = query.shape
        if seq != 1 or hidden % heads or key is None or value is None:
            raise BadInputError(
                f"{self.label()}: needs query (batch, 1, hidden) with hidden divisible by "
                f"num_heads={heads}, and key and value; received query {tuple(query.shape)}"
            )
        if bias is not None:
            query = query + bias[:hidden]
        q = query.reshape(batch, 1, heads, -1).transpose(1, 2)
        if key.dim() == 4:  # cross-attention: keys and values already split into heads
            k, v, present = key, value, (None, None)
        else:
            if bias is not None:
                key, value = key + bias[hidden : 2 * hidden], value + bias[2 * hidden :]
            k, v, length = self._write(past_k, past_v, past_length, key, value, heads)
            present = (k, v)
            k, v = k[:, :, : length + 1], v[:, :, : length + 1]
        scale = float(self.attr("scale")) or 1 / math.sqrt(q.shape[3])
        scores = torch.matmul(q, k.transpose(2, 3)) * scale
        if mask is not None:
            masked = (mask[:, : k.shape[2]] <= 0).reshape(batch, 1, 1, -1)
            scores = scores + masked.to(scores.dtype) * float(self.attr("mask_filter_value"))
        if attention_bias is not None:
            scores = scores + attention_bias[..., : k.shape[2]]
        out = torch.matmul(torch.softmax(scores, -1), v)
        return out.transpose(1, 2).reshape(batch, 1, -1), *present

    def _write(
        self,
        past_k: torch.Tensor | None,
        past_v: torch.Tensor | None,
        past_length: torch.Tensor | None,
        key: torch.Tensor,
        value: torch.Tensor,
        heads: int,
    ) -> tuple[torch.Tensor, torch.Tensor, int]:
        """The shared buffers with this step's key and value written at row past length,
        and that length."""
        if past_k is None or past_v is None or past_length is None:
            raise BadInputError(
                f"{self.label()}: self-attention needs past_key, past_value and "
                "past_sequence_length (the shared KV buffer and its valid length)"
            )
        if not self.attr("past_present_share_buffer"):
            raise BadInputError(
                f"{self.label()}: self-attention needs past_present_share_buffer=1 (as "
                "onnxruntime's CPU kernel does); received 0"
            )
        length = int(host(past_length).reshape(-1)[0])
        if not 0 <= length < past_k.shape[2]:
            raise BadInputError(
                f"{self.label()}: past_sequence_length {length} must leave a free row in "
                f"the KV buffer of {past_k.shape[2]} rows"
            )
        new_k = key.reshape(key.shape[0], 1, heads, -1).transpose(1, 2)
        new_v = value.reshape(value.shape[0], 1, heads, -1).transpose(1, 2)
        row = torch.arange(past_k.shape[2], device=key.device).reshape(1, 1, -1, 1)
        at = row == length
        return torch.where(at, new_k, past_k), torch.where(at, new_v, past_v), length
