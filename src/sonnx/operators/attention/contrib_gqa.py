"""com.microsoft rotary embedding and grouped-query attention, matched to onnxruntime's CPU kernels.

onnx.defs has no schemas for the com.microsoft domain: each class declares its attribute
defaults (from onnxruntime's ``docs/ContribOperators.md``) in ``defaults``, read by
:meth:`ContribOperator.attr`. Forward runs on torch tensors, so gradients come from autograd;
export writes the node back as it came (same op type, domain and attributes).

What onnxruntime's CPU kernels do where the text leaves it open, and these classes follow:

- GroupQueryAttention keeps each sequence's cache *right*-padded: sequence ``b`` has
  ``seqlens_k[b] + 1`` valid cache rows. On the first prompt (``sequence_length ==
  total_sequence_length > 1``) the new keys start at row 0; otherwise they are written at rows
  ``seqlens_k[b] + 1 - sequence_length`` onwards, after that many rows of the past. Rows past
  a sequence's length (in the output and the present cache) are unspecified.
- Its fused rotary takes positions ``0 .. S-1`` on the first prompt and
  ``seqlens_k[b] + 1 - S + s`` afterwards; a ``position_ids`` input replaces them, except that
  on a first prompt only its first element counts, as the start of every sequence.
- Query row ``s`` sees cache rows up to its own, and with ``local_window_size = w`` only the
  last ``w`` of them (its own included); ``attention_bias`` is added after ``softcap``; a
  ``head_sink`` logit per head (or a zero one with ``smooth_softmax``) joins each softmax.
- A step of one token per sequence on the CPU, without gradients, attends over each sequence's
  filled rows only (:mod:`~sonnx.operators.attention.filled_rows`), also in graph mode's trace,
  where the lengths are data: not over the whole buffer with a mask.
- A past as long as the present (a buffer of the maximum length, genai's
  ``past_present_share_buffer``) is the present when the caller lets caches be written in
  place (:data:`sonnx.run_state.CACHES_IN_PLACE`, set by the decode loop): the new rows are
  written into it, as onnxruntime's kernel does when past and present share a buffer, and no
  cache is copied. Otherwise the present is a new tensor and the inputs stay as they were.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch

from sonnx.engine.operator import OutputShape, host_ints
from sonnx.engine.tracing import value_checks
from sonnx.errors import BadInputError, UnsupportedOperatorError
from sonnx.operators.attention.filled_rows import attend_rows, attends_filled_rows
from sonnx.operators.contrib import ContribOperator
from sonnx.run_state import CACHES_IN_PLACE
from sonnx.symbolic_sizes import has_symbols

__all__ = ["GroupQueryAttention", "RotaryEmbedding"]


def rotate(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool
) -> torch.Tensor:
    """Rotary embedding of ``x`` (..., head size) by ``cos``/``sin`` (..., rotary dim / 2).

    The first ``2 * cos.shape[-1]`` features are rotated, in pairs (2i, 2i+1) when
    ``interleaved``, else (i, i + rotary dim / 2); the rest pass through.
    """
    half = cos.shape[-1]
    rot, keep = x[..., : 2 * half], x[..., 2 * half :]
    if interleaved:
        x1, x2 = rot[..., 0::2], rot[..., 1::2]
    else:
        x1, x2 = rot[..., :half], rot[..., half:]
    real = cos * x1 - sin * x2
    imag = sin * x1 + cos * x2
    if interleaved:
        rotated = torch.stack([real, imag], -1).reshape(rot.shape)
    else:
        rotated = torch.cat([real, imag], -1)
    if keep.shape[-1] == 0:  # the whole head rotated (a fixed size, also in a trace)
        return rotated
    return torch.cat([rotated, keep], -1)


class RotaryEmbedding(ContribOperator):
    """com.microsoft RotaryEmbedding: inputs (input, position_ids, cos_cache, sin_cache).

    ``input`` is (batch, seq, hidden) or (batch, heads, seq, head size); ``position_ids`` is
    (batch, seq), or one number: the position of the first token, the others following it.
    ``cos_cache``/``sin_cache`` are (max position + 1, rotary dim / 2). onnxruntime's CPU kernel
    ignores ``scale`` and ``is_packed_batching``, and so does this class.
    """

    op_type = "RotaryEmbedding"
    since_versions = (1,)
    defaults: ClassVar[dict[str, Any]] = {
        "interleaved": 0,
        "is_packed_batching": 0,
        "num_heads": 0,
        "rotary_embedding_dim": 0,
        "scale": 1.0,
    }
    output_shape = OutputShape.FROM_SHAPES
    # The cos and sin caches are fixed tables; position_ids are data.
    parameterising_inputs = frozenset({2, 3})

    def forward(
        self,
        x: torch.Tensor,
        position_ids: torch.Tensor | None = None,
        cos_cache: torch.Tensor | None = None,
        sin_cache: torch.Tensor | None = None,
    ) -> torch.Tensor:
        self.require({"position_ids": position_ids, "cos_cache": cos_cache,
                      "sin_cache": sin_cache})  # fmt: skip
        half = cos_cache.shape[-1]
        if x.dim() == 4:
            work = x.transpose(1, 2)
        elif x.dim() == 3:
            heads = int(self.attr("num_heads")) or x.shape[2] // (2 * half)
            if heads <= 0 or x.shape[2] % heads:
                raise BadInputError(
                    f"{self.label()}: a 3-D input needs num_heads dividing its hidden size "
                    f"{x.shape[2]}, received num_heads={heads}"
                )
            work = x.reshape(x.shape[0], x.shape[1], heads, x.shape[2] // heads)
        else:
            raise BadInputError(
                f"{self.label()}: input must be 3-D (batch, seq, hidden) or 4-D (batch, heads, "
                f"seq, head size), received shape {tuple(x.shape)}"
            )
        dim = int(self.attr("rotary_embedding_dim")) or work.shape[3]
        if cos_cache.shape != sin_cache.shape or 2 * half != dim or dim > work.shape[3]:
            raise BadInputError(
                f"{self.label()}: cos_cache and sin_cache must both be (max position + 1, "
                f"{dim // 2}) for rotary dim {dim} and head size {work.shape[3]}, received "
                f"{tuple(cos_cache.shape)} and {tuple(sin_cache.shape)}"
            )
        positions = _positions(position_ids, work.shape[0], work.shape[1])
        cos = cos_cache[positions].unsqueeze(2)
        sin = sin_cache[positions].unsqueeze(2)
        out = rotate(work, cos, sin, bool(self.attr("interleaved")))
        return out.reshape(x.shape) if x.dim() == 3 else out.transpose(1, 2)


def _positions(position_ids: torch.Tensor, batch: int, seq: int) -> torch.Tensor:
    """(batch, seq) positions: as given, or counted on from a single start position."""
    if position_ids.numel() == 1:
        start = position_ids.reshape(()).long()
        steps = torch.arange(seq, device=position_ids.device)
        return (start + steps).expand(batch, seq)
    return position_ids.long().reshape(batch, seq)


class GroupQueryAttention(ContribOperator):
    """com.microsoft GroupQueryAttention as onnxruntime's CPU kernel runs it (float caches).

    Inputs: query (batch, seq, heads * size), or packed Q, K and V in ``query`` with ``key`` and
    ``value`` absent; past_key/past_value (batch, kv heads, past length, size) (BNSH);
    seqlens_k (batch) = valid cache length after this step minus one; total_sequence_length
    (scalar); cos_cache/sin_cache for ``do_rotary``. Outputs: output (batch, seq,
    heads * size) and present_key/present_value (batch, kv heads, max(total, past length),
    size). See the module docstring for the cache and position rules.
    """

    op_type = "GroupQueryAttention"
    since_versions = (1,)
    defaults: ClassVar[dict[str, Any]] = {
        "do_rotary": 0,
        "kv_cache_bit_width": 0,
        "local_window_size": -1,
        "qk_output": 0,
        "rotary_interleaved": 0,
        "scale": 0.0,
        "smooth_softmax": -1,
        "softcap": 0.0,
        "k_quant_type": "NONE",
        "v_quant_type": "NONE",
    }
    output_shape = OutputShape.FROM_SHAPES
    # total_sequence_length sets the present cache's length; cos/sin caches are tables.
    shape_inputs = frozenset({6})
    size_inputs = frozenset({6})
    parameterising_inputs = frozenset({6, 7, 8})

    def forward(self, *xs: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
        xs = tuple(xs) + (None,) * (17 - len(xs))
        query, key, value, past_key, past_value, seqlens_k, total, cos_cache, sin_cache = xs[:9]
        position_ids, attention_bias, head_sink = xs[9:12]
        self.require({"seqlens_k": seqlens_k, "total_sequence_length": total})
        self._refuse_unsupported(xs)
        heads, kv_heads = int(self.attr("num_heads")), int(self.attr("kv_num_heads"))
        q, k, v = self._split(query, key, value, heads, kv_heads)
        batch, seq = q.shape[0], q.shape[2]
        (total_length,) = host_ints(total)
        if self._one_token_in_place(q, past_key, past_value, total_length, xs):
            return self._decode_one_token(q, k, v, past_key, past_value, seqlens_k, xs)
        past_length = 0 if past_key is None else past_key.shape[2]
        first_prompt = seq > 1 and seq == total_length
        valid = seqlens_k.long().reshape(batch) + 1  # cache rows after this step
        start = torch.zeros_like(valid) if first_prompt else valid - seq  # first new row
        if self.attr("do_rotary"):
            positions = start.reshape(-1, 1) + torch.arange(seq, device=q.device)
            if position_ids is not None and first_prompt:
                # The kernel reads a first prompt's position_ids as one start position.
                positions = position_ids.reshape(-1)[0].long() + torch.arange(seq, device=q.device)
                positions = positions.expand(batch, seq)
            elif position_ids is not None:
                positions = position_ids.long().reshape(batch, seq)
            q, k = self._rotary(q, k, positions, cos_cache, sin_cache)
        if _shared_buffer(past_key, past_value, total_length):
            present_k = _write_in_place(past_key, k, start)
            present_v = _write_in_place(past_value, v, start)
        else:
            present_length = max(total_length, past_length)
            present_k = _write_cache(past_key, k, start, present_length)
            present_v = _write_cache(past_value, v, start, present_length)
        seen_k, seen_v = present_k, present_v
        if first_prompt:
            # Query row s sits at cache row s and sees rows up to it: the rows after the
            # prompt (a preallocated buffer's, up to the longest generation) are never seen.
            seen_k, seen_v = present_k[:, :, :seq], present_v[:, :, :seq]
        out = self._attend(q, seen_k, seen_v, start, attention_bias, head_sink, first_prompt)
        return out.transpose(1, 2).reshape(batch, seq, -1), present_k, present_v

    def _one_token_in_place(
        self,
        q: torch.Tensor,
        past_key: torch.Tensor | None,
        past_value: torch.Tensor | None,
        total_length: int,
        xs: tuple[torch.Tensor | None, ...],
    ) -> bool:
        """Whether this call is one decode step of one sequence into a shared buffer, run
        eagerly on the CPU without gradients: the generation loop's step, which
        :meth:`_decode_one_token` runs with half the general path's torch calls.

        Its cache row is read on the host, so never while a graph is traced
        (:func:`~sonnx.engine.tracing.value_checks` is off then) nor off the CPU (a read
        there waits for the device), nor while the CPU stands in for a device
        (:data:`~sonnx.run_state.CPU_AS_DEVICE`, a test counting host reads).
        """
        # value_checks first: under a tracer the size tests below would guard the batch.
        return (
            value_checks()
            and q.shape[0] == 1
            and _shared_buffer(past_key, past_value, total_length)
            and attends_filled_rows(q, past_key, past_value)  # one token, CPU, no gradient
            and xs[10] is None  # attention_bias
            and xs[11] is None  # head_sink
            and float(self.attr("softcap")) == 0
            and int(self.attr("smooth_softmax")) <= 0
        )

    def _decode_one_token(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        past_key: torch.Tensor,
        past_value: torch.Tensor,
        seqlens_k: torch.Tensor,
        xs: tuple[torch.Tensor | None, ...],
    ) -> tuple[torch.Tensor, ...]:
        """The general path's results for one token of one sequence (see
        :meth:`_one_token_in_place`): its row is known on the host, so the cache is written
        and read by slicing, and attention runs over the rows it sees, with no mask."""
        row = int(seqlens_k.reshape(()))  # the new token's cache row
        _check_past(past_key, k)
        _check_past(past_value, v)
        if not 0 <= row < past_key.shape[2]:
            raise BadInputError(
                f"{self.label()}: seqlens_k {row} puts the new token past the cache's "
                f"{past_key.shape[2]} rows"
            )
        if self.attr("do_rotary"):
            position_ids = xs[9]
            position = row if position_ids is None else int(position_ids.reshape(()))
            cos, sin = self._angles(position, xs[7], xs[8])
            # One rotation of the query and key heads together: a call fewer of each op.
            both = rotate(torch.cat([q, k], 1), cos, sin, bool(self.attr("rotary_interleaved")))
            q, k = both[:, : q.shape[1]], both[:, q.shape[1] :]
        past_key[:, :, row] = k[:, :, 0]
        past_value[:, :, row] = v[:, :, 0]
        window = int(self.attr("local_window_size"))
        out = attend_rows(q, past_key, past_value, row + 1, self._scale(q), window)
        return out.reshape(1, 1, -1), past_key, past_value

    def _refuse_unsupported(self, xs: tuple[torch.Tensor | None, ...]) -> None:
        names = ["k_scale", "v_scale", "q_norm_weight", "k_norm_weight", "query_seqlens"]
        given = [n for n, x in zip(names, xs[12:], strict=True) if x is not None]
        quantized = {self.attr("k_quant_type"), self.attr("v_quant_type")} != {"NONE"}
        if self.attr("kv_cache_bit_width") or quantized:
            given.append("a quantized KV cache")
        if self.attr("qk_output"):
            given.append("qk_output")
        if given:
            raise UnsupportedOperatorError(f"{self.label()}: {', '.join(given)} not supported")

    def _split(
        self,
        query: torch.Tensor,
        key: torch.Tensor | None,
        value: torch.Tensor | None,
        heads: int,
        kv_heads: int,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Q (batch, heads, seq, size) and K, V (batch, kv heads, seq, size)."""
        if heads <= 0 or kv_heads <= 0 or heads % kv_heads or query.dim() != 3:
            raise BadInputError(
                f"{self.label()}: needs a 3-D query and kv_num_heads dividing num_heads, "
                f"received query {tuple(query.shape)}, num_heads={heads}, "
                f"kv_num_heads={kv_heads}"
            )
        b, s, hidden = query.shape
        if key is None:
            size = hidden // (heads + 2 * kv_heads)
            if size * (heads + 2 * kv_heads) != hidden:
                raise BadInputError(
                    f"{self.label()}: packed QKV hidden size {hidden} is not (num_heads + 2 * "
                    f"kv_num_heads) * head size"
                )
            query, key, value = query.split([heads * size, kv_heads * size, kv_heads * size], 2)
        if value is None or key.shape[:2] != (b, s) or value.shape[:2] != (b, s):
            raise BadInputError(
                f"{self.label()}: key and value must both be (batch, seq, kv hidden) like the "
                f"query's {tuple(query.shape)}, received key "
                f"{tuple(key.shape)} and value {None if value is None else tuple(value.shape)}"
            )

        def heads_first(x: torch.Tensor, n: int) -> torch.Tensor:
            return x.reshape(b, s, n, -1).transpose(1, 2)

        return heads_first(query, heads), heads_first(key, kv_heads), heads_first(value, kv_heads)

    def _rotary(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        positions: torch.Tensor,
        cos_cache: torch.Tensor | None,
        sin_cache: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Q and K rotated by the angles of their (batch, seq) positions."""
        cos, sin = self._angles(positions, cos_cache, sin_cache)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # (batch, 1, seq, rotary / 2)
        interleaved = bool(self.attr("rotary_interleaved"))
        return rotate(q, cos, sin, interleaved), rotate(k, cos, sin, interleaved)

    def _scale(self, q: torch.Tensor) -> float:
        """The scores' scale: the ``scale`` attribute, or 1 / sqrt(head size) where it is 0."""
        return float(self.attr("scale")) or 1 / math.sqrt(q.shape[3])

    def _angles(
        self,
        positions: torch.Tensor | int,
        cos_cache: torch.Tensor | None,
        sin_cache: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The rows of cos_cache and sin_cache at ``positions`` (a tensor of them, or one)."""
        if cos_cache is None or sin_cache is None:
            raise BadInputError(f"{self.label()}: do_rotary=1 needs cos_cache and sin_cache")
        return cos_cache[positions], sin_cache[positions]

    def _attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        start: torch.Tensor,
        attention_bias: torch.Tensor | None,
        head_sink: torch.Tensor | None,
        causal: bool = False,
    ) -> torch.Tensor:
        """Causal (optionally windowed, soft-capped, biased) attention of Q over the present
        cache; a head sink (or ``smooth_softmax``'s zero) joins each softmax as one more logit
        whose weight is dropped. ``causal``: query row s sits at cache row s (a first prompt,
        the cache cut to its rows), so plain attention needs no mask."""
        scale = self._scale(q)
        window = int(self.attr("local_window_size"))
        softcap = float(self.attr("softcap"))
        plain = softcap == 0 and head_sink is None and int(self.attr("smooth_softmax")) <= 0
        if plain and not causal and attention_bias is None and attends_filled_rows(q, k, v):
            # One token per sequence: each attends over its filled rows, not the buffer's.
            return torch.ops.sonnx.attend_filled_rows(q, k, v, start + 1, scale, window)
        # inductor (torch 2.13) fails an assertion on the query's layout when it lowers the
        # fused kernel under symbolic sizes; a graph traced with them takes the explicit path.
        fused = plain and not has_symbols(q.shape)
        if fused and causal and window <= 0 and attention_bias is None:
            return torch.nn.functional.scaled_dot_product_attention(
                q, k, v, is_causal=True, scale=scale, enable_gqa=True
            )
        # Query row s sits at cache row start + s and sees rows up to it (within the window).
        steps = torch.arange(q.shape[2], device=q.device).reshape(-1, 1)
        row = start.reshape(-1, 1, 1, 1) + steps
        col = torch.arange(k.shape[2], device=q.device)
        allowed = col <= row
        if window > 0:
            allowed = allowed & (col > row - window)
        if fused:
            # Plain softmax attention: torch's fused kernel (forward and backward, as LoRA
            # training needs), sharing the KV heads without repeating them.
            mask = allowed
            if attention_bias is not None:
                extra = k.shape[2] - attention_bias.shape[-1]
                bias = torch.nn.functional.pad(attention_bias, (0, extra))
                mask = bias.to(q.dtype).masked_fill(~allowed, -math.inf)
            return torch.nn.functional.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, scale=scale, enable_gqa=True
            )
        k, v = _shared_heads(k, q.shape[1]), _shared_heads(v, q.shape[1])
        scores = torch.matmul(q, k.transpose(2, 3)) * scale
        if softcap > 0:
            scores = softcap * torch.tanh(scores / softcap)
        if attention_bias is not None:
            # Its last dim is total_sequence_length; cache rows beyond it are masked anyway.
            extra = k.shape[2] - attention_bias.shape[-1]
            scores = scores + torch.nn.functional.pad(attention_bias, (0, extra))
        scores = scores.masked_fill(~allowed, -math.inf)
        if head_sink is None and int(self.attr("smooth_softmax")) > 0:
            head_sink = scores.new_zeros(q.shape[1])
        if head_sink is None:
            return torch.matmul(torch.softmax(scores, -1), v)
        sink = head_sink.to(scores.dtype).reshape(1, -1, 1, 1).expand(*scores.shape[:3], 1)
        probs = torch.softmax(torch.cat([scores, sink], -1), -1)[..., :-1]
        return torch.matmul(probs, v)


def _shared_buffer(
    past_key: torch.Tensor | None, past_value: torch.Tensor | None, total_length: int
) -> bool:
    """Whether the past is a buffer as long as the present, which the caller lets be written
    in place (:data:`~sonnx.run_state.CACHES_IN_PLACE`)."""
    return (
        past_key is not None
        and past_value is not None
        and past_key.shape[2] >= total_length
        and CACHES_IN_PLACE.get()
    )


def _shared_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """The KV heads (batch, kv heads, rows, size) repeated for the ``heads`` query heads, each
    KV head serving ``heads / kv heads`` consecutive ones. Written with expand rather than
    ``repeat_interleave``, whose output size graph mode's tracer cannot know."""
    b, n, rows, size = x.shape
    return x.unsqueeze(2).expand(b, n, heads // n, rows, size).reshape(b, heads, rows, size)


def _write_cache(
    past: torch.Tensor | None, new: torch.Tensor, start: torch.Tensor, length: int
) -> torch.Tensor:
    """The present cache: ``past`` with ``new``'s rows written from row ``start[b]`` on.

    Both are (batch, kv heads, rows, size); rows beyond the past keep its values (zeros where
    it has none).
    """
    b, n, s, d = new.shape
    if past is None:
        past = new.new_zeros(b, n, 0, d)
    _check_past(past, new)
    base = torch.nn.functional.pad(past, (0, 0, 0, length - past.shape[2]))
    offset = torch.arange(length, device=new.device) - start.reshape(-1, 1)  # (batch, length)
    inside = (offset >= 0) & (offset < s)
    index = offset.clamp(0, s - 1).reshape(b, 1, length, 1).expand(b, n, length, d)
    written = torch.gather(new, 2, index)
    return torch.where(inside.reshape(b, 1, length, 1), written, base)


def _write_in_place(past: torch.Tensor, new: torch.Tensor, start: torch.Tensor) -> torch.Tensor:
    """``past`` with ``new``'s rows written into it from row ``start[b]`` on: the present of
    a shared buffer (both (batch, kv heads, rows, size)). One ``index_put_``, which inductor
    keeps in place on the graph's input rather than copying the buffer."""
    _check_past(past, new)
    b, n, s, _ = new.shape
    device = new.device
    rows = start.reshape(b, 1, 1) + torch.arange(s, device=device).reshape(1, 1, s)
    batch = torch.arange(b, device=device).reshape(b, 1, 1)
    heads = torch.arange(n, device=device).reshape(1, n, 1)
    return past.index_put_((batch, heads, rows), new)


def _check_past(past: torch.Tensor, new: torch.Tensor) -> None:
    b, n, _, d = new.shape
    if past.dim() != 4 or past.shape[0] != b or past.shape[1] != n or past.shape[3] != d:
        raise BadInputError(
            f"GroupQueryAttention: past_key/past_value must be (batch {b}, kv heads {n}, past "
            f"length, head size {d}) in BNSH layout, received {tuple(past.shape)}"
        )
