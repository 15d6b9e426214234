"""onnxruntime's fused normalizations, matched to its CPU kernels: SkipLayerNormalization,
SkipSimplifiedLayerNormalization, SimplifiedLayerNormalization (registered by onnxruntime in
the default domain), EmbedLayerNormalization, and the NHWC GroupNorm and SkipGroupNorm of its
diffusion models (CUDA-only in onnxruntime; here they follow ``ContribOperators.md``).

Statistics are computed in float32 for half-precision inputs (as onnxruntime does) and
returned in that type; the gradients come from torch autograd.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from sonnx.dtypes import dtype_name
from sonnx.engine.operator import TorchOutputs
from sonnx.engine.tracing import value_checks
from sonnx.errors import BadInputError
from sonnx.operators.normalization.common import (
    check_broadcasts_to,
    check_float,
    check_rank,
    compute_dtype,
)
from sonnx.operators.normalization.contrib_base import ContribNormOperator, check_vector
from sonnx.operators.normalization.layer import rms_normalize

__all__: list[str] = []

# onnxruntime's kDefaultSkipLayerNormEpsilon and kDefaultEmbedLayerNormEpsilon.
_BERT_EPSILON = 1e-12


def _skip_sum(
    op: ContribNormOperator, x: torch.Tensor, skip: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    """``input + skip (+ bias)`` after the checks onnxruntime's skip norms make, summed in
    compute precision (float32 for half inputs, rounded once, as onnxruntime does)."""
    check_float(op.op_type, "input", x)
    if x.dim() not in (2, 3):
        raise BadInputError(
            f"{op.op_type}: input must be 3-D (batch, sequence, hidden) or 2-D (tokens, "
            f"hidden), received shape {tuple(x.shape)}"
        )
    check_float(op.op_type, "skip", skip)
    # Eagerly, equal shapes (the common case) need no broadcasting check; in a trace the
    # comparison would guard the sizes' equality, so the check runs there.
    if not (value_checks() and skip.shape == x.shape):
        check_broadcasts_to(op.op_type, "skip", skip, x.shape)
    wide = compute_dtype(x.dtype)
    total = _widened(x, wide) + _widened(skip, wide)
    if bias is not None:
        check_vector(op.op_type, "bias", bias, x.shape[-1])
        total = total + _widened(bias, wide)
    return total


def _widened(x: torch.Tensor, wide: torch.dtype) -> torch.Tensor:
    """``x`` in compute precision; itself, without a torch call, where it is in it already
    (a decode step runs two such norms per layer, and each call costs microseconds)."""
    return x if x.dtype == wide else x.to(wide)


def _normalize(
    total: torch.Tensor, epsilon: float, centered: bool, with_mean: bool
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """(normalized, mean, inv_std_var) over the last axis of ``total`` (in compute
    precision); without ``centered`` the mean is zero and the variance the mean square. The
    zero mean is made only ``with_mean`` (the node asks for it)."""
    xc = total
    mean = None
    if centered:
        mean = xc.mean(dim=-1, keepdim=True)
        xc = xc - mean
    elif with_mean:
        mean = torch.zeros_like(xc[..., :1])
    inv_std = torch.rsqrt((xc * xc).mean(dim=-1, keepdim=True) + epsilon)
    return xc * inv_std, mean, inv_std


class SkipLayerNormalization(ContribNormOperator):
    """``LayerNorm(input + skip + bias) * gamma + beta`` over the hidden (last) axis.

    input (B, S, H) or (T, H); skip the same shape or one broadcasting to it ((1, S, H),
    (S, H)); gamma, beta and bias (H,). Optional outputs: mean and inv_std_var (shape of
    input with the last axis 1) and input_skip_bias_sum.
    """

    op_type = "SkipLayerNormalization"
    since_versions = (1,)
    defaults = {"epsilon": _BERT_EPSILON}
    #: Subtracts the mean (a LayerNorm); the simplified form does not (an RMS norm).
    centered: bool = True

    def forward(self, x, skip, gamma, beta=None, bias=None) -> TorchOutputs:  # type: ignore[override]
        total = _skip_sum(self, x, skip, bias)
        hidden = x.shape[-1]
        check_vector(self.op_type, "gamma", gamma, hidden)
        if beta is not None:
            check_vector(self.op_type, "beta", beta, hidden)
        with_mean = (self.requested_outputs or 1) > 1
        normed, mean, inv_std = _normalize(
            total, float(self.attr("epsilon")), self.centered, with_mean
        )
        y = normed * gamma if beta is None else normed * gamma + beta
        return self.requested(_widened(y, x.dtype), mean, inv_std, _widened(total, x.dtype))


class SkipSimplifiedLayerNormalization(SkipLayerNormalization):
    """``RMSNorm(input + skip + bias) * gamma`` (no beta, inputs input, skip, gamma, bias).

    Outputs as SkipLayerNormalization's; its mean output is zeros, as onnxruntime writes it.
    """

    op_type = "SkipSimplifiedLayerNormalization"
    since_versions = (1,)
    centered = False

    def forward(self, x, skip, gamma, bias=None) -> TorchOutputs:  # type: ignore[override]
        return super().forward(x, skip, gamma, None, bias)


class SimplifiedLayerNormalization(ContribNormOperator):
    """``X / sqrt(mean(X^2 over axes axis..last) + epsilon) * scale`` (RMS norm), Y in scale's
    type; the optional inv_std_var (X's shape, normalized axes 1) in ``stash_type``.

    onnxruntime registers it in the default ONNX domain, which has no schema for it.
    """

    op_type = "SimplifiedLayerNormalization"
    domain = ""
    since_versions = (1,)
    defaults = {"axis": -1, "epsilon": 1e-5, "stash_type": 1}

    def forward(self, x, scale) -> TorchOutputs:  # type: ignore[override]
        return self.requested(*rms_normalize(self, x, scale))


class EmbedLayerNormalization(ContribNormOperator):
    """BERT's embeddings and their LayerNorm in one node.

    ``LayerNorm(word[input_ids] + position[position_ids] + segment[segment_ids])`` with gamma
    and beta; position_ids (B, S) or (1, S) default to 0..S-1. Outputs: output (B, S, H),
    mask_index (B,) int32, the count of ones in each row of mask (zeros without a mask), and
    embedding_sum, the sum before the normalization.
    """

    op_type = "EmbedLayerNormalization"
    since_versions = (1,)
    defaults = {"epsilon": _BERT_EPSILON, "mask_index_type": 1}

    def forward(  # type: ignore[override]
        self,
        input_ids,
        segment_ids,
        word_embedding,
        position_embedding,
        segment_embedding,
        gamma,
        beta,
        mask=None,
        position_ids=None,
    ) -> TorchOutputs:
        batch, seq = self._check_ids("input_ids", input_ids, None)
        hidden = word_embedding.shape[-1]
        positions = position_ids
        if positions is None:
            positions = torch.arange(seq, device=input_ids.device).unsqueeze(0)
        total = self._lookup("word_embedding", word_embedding, input_ids, hidden) + self._lookup(
            "position_embedding", position_embedding, positions, hidden
        )
        if (segment_ids is None) != (segment_embedding is None):
            given = "segment_ids" if segment_embedding is None else "segment_embedding"
            raise BadInputError(
                f"{self.op_type}: segment_ids and segment_embedding must be given together, "
                f"received only {given}"
            )
        if segment_ids is not None:
            self._check_ids("segment_ids", segment_ids, (batch, seq))
            segments = self._lookup("segment_embedding", segment_embedding, segment_ids, hidden)
            total = total + segments
        check_vector(self.op_type, "gamma", gamma, hidden)
        check_vector(self.op_type, "beta", beta, hidden)
        y = F.layer_norm(total, (hidden,), gamma, beta, float(self.attr("epsilon")))
        if mask is None:
            mask_index = torch.zeros(batch, dtype=torch.int32, device=input_ids.device)
        else:
            self._check_ids("mask", mask, (batch, seq))
            mask_index = (mask == 1).sum(dim=1, dtype=torch.int32)
        return self.requested(y, mask_index, total)

    def _check_ids(
        self, name: str, ids: torch.Tensor, shape: tuple[int, int] | None
    ) -> tuple[int, int]:
        if ids.dtype not in (torch.int32, torch.int64) or ids.dim() != 2:
            raise BadInputError(
                f"{self.op_type}: input {name} must be a 2-D int32 tensor (batch, sequence), "
                f"received {dtype_name(ids.dtype)} of shape {tuple(ids.shape)}"
            )
        if shape is not None and tuple(ids.shape) != shape:
            raise BadInputError(
                f"{self.op_type}: input {name} must have input_ids' shape {shape}, received "
                f"shape {tuple(ids.shape)}"
            )
        return ids.shape[0], ids.shape[1]

    def _lookup(
        self, name: str, table: torch.Tensor, ids: torch.Tensor, hidden: int
    ) -> torch.Tensor:
        """Rows ``ids`` of ``table`` (rows, hidden), the ids checked while values may be read."""
        check_float(self.op_type, name, table)
        if table.dim() != 2 or table.shape[1] != hidden:
            raise BadInputError(
                f"{self.op_type}: input {name} must have shape (rows, {hidden}), received shape "
                f"{tuple(table.shape)}"
            )
        if value_checks() and ids.numel() and not 0 <= ids.min() <= ids.max() < len(table):
            raise BadInputError(
                f"{self.op_type}: the ids looked up in {name} must be in [0, {len(table) - 1}], "
                f"received values in [{int(ids.min())}, {int(ids.max())}]"
            )
        return table[ids.long()]


class GroupNorm(ContribNormOperator):
    """Group normalization of an NHWC (``channels_last=1``, the default) or NCHW input,
    ``activation=1`` adding SiLU after it; gamma and beta (C,)."""

    op_type = "GroupNorm"
    since_versions = (1,)
    defaults = {"epsilon": 1e-5, "channels_last": 1}
    required_attributes = frozenset({"groups", "activation"})

    def forward(self, x, gamma, beta) -> torch.Tensor:  # type: ignore[override]
        return self._group_norm(x, gamma, beta)

    def _group_norm(self, x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
        op = self.op_type
        check_float(op, "X", x)
        check_rank(op, "X", x, 4, "4-D (N, H, W, C) or, with channels_last=0, (N, C, H, W)")
        channels_last = int(self.attr("channels_last")) == 1
        nchw = x.permute(0, 3, 1, 2) if channels_last else x
        channels, groups = nchw.shape[1], int(self.attr("groups"))
        if groups <= 0 or channels % groups:
            raise BadInputError(
                f"{op}: attribute groups must divide the {channels} channels, received {groups}"
            )
        check_vector(op, "gamma", gamma, channels)
        check_vector(op, "beta", beta, channels)
        activation = int(self.attr("activation"))
        if activation not in (0, 1):
            raise BadInputError(
                f"{op}: attribute activation must be 0 (none) or 1 (SiLU), received {activation}"
            )
        wide = compute_dtype(x.dtype)
        y = F.group_norm(
            nchw.to(wide), groups, gamma.to(wide), beta.to(wide), float(self.attr("epsilon"))
        )
        if activation == 1:
            y = F.silu(y)
        return (y.permute(0, 2, 3, 1) if channels_last else y).to(x.dtype)


class SkipGroupNorm(GroupNorm):
    """GroupNorm of ``X + skip + bias`` (NHWC only); skip (N, H, W, C), (N, 1, 1, C) or
    (N, C), bias (C,). The optional output S is that sum."""

    op_type = "SkipGroupNorm"
    since_versions = (1,)

    def forward(self, x, gamma, beta, skip, bias=None) -> TorchOutputs:  # type: ignore[override]
        op = self.op_type
        check_float(op, "X", x)
        check_rank(op, "X", x, 4, "4-D (N, H, W, C)")
        if int(self.attr("channels_last")) != 1:
            raise BadInputError(
                f"{op}: only channels_last=1 (NHWC) is defined, received "
                f"channels_last={self.attr('channels_last')}"
            )
        check_float(op, "skip", skip)
        n, channels = x.shape[0], x.shape[3]
        if skip.dim() == 2 and tuple(skip.shape) == (n, channels):
            skip = skip.reshape(n, 1, 1, channels)
        elif tuple(skip.shape) not in (tuple(x.shape), (n, 1, 1, channels)):
            raise BadInputError(
                f"{op}: input skip must have shape {tuple(x.shape)}, ({n}, 1, 1, {channels}) or "
                f"({n}, {channels}), received shape {tuple(skip.shape)}"
            )
        total = x + skip
        if bias is not None:
            check_vector(op, "bias", bias, channels)
            total = total + bias
        y = self._group_norm(total, gamma, beta)
        return self.requested(y, total)
