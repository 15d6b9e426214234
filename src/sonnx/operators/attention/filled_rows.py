"""A decode step's attention over the cache rows each sequence has filled, as one extern call.

A decode step's query (one token per sequence) sees its sequence's cache rows ``0 .. length - 1``,
the last ``window`` of them with a local window. Where those lengths are data a trace cannot
read (graph mode's decode step, and a batch of sequences of different lengths), the general
path attends over the whole buffer with a mask; over a buffer of ``prompt + max_new_tokens``
rows, every step then reads every row, and the step's cost grows with the generation's length.
``sonnx::attend_filled_rows`` reads the lengths on the host inside the call and attends over
each sequence's own rows, as onnxruntime's CPU kernel does: graph mode's trace keeps it as one
extern call, so its compiled decode steps cost what the filled rows cost.

It runs on the CPU without gradients: on a device a host read waits for the device (and a CUDA
graph needs fixed shapes), and training takes the general path's differentiable ops.
"""

from __future__ import annotations

import torch

from sonnx.engine.extern_ops import extern_op
from sonnx.errors import BadInputError
from sonnx.run_state import CPU_AS_DEVICE

__all__ = ["attend_filled_rows", "attend_rows", "attends_filled_rows"]


def attends_filled_rows(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> bool:
    """Whether a one-token step's plain attention of ``q`` over the cache ``k``, ``v`` runs
    as :func:`attend_filled_rows`: on the CPU (not standing in for a device, as a test
    counting host reads has it: :data:`~sonnx.run_state.CPU_AS_DEVICE`), with no gradient."""
    return (
        q.shape[2] == 1
        and q.device.type == "cpu"
        and not CPU_AS_DEVICE.get()
        and not (torch.is_grad_enabled() and any(x.requires_grad for x in (q, k, v)))
    )


def _attend_filled_rows_fake(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lengths: torch.Tensor, scale: float,
    window: int,
) -> torch.Tensor:  # fmt: skip
    return q.new_empty(q.shape)


@extern_op(
    "attend_filled_rows",
    "(Tensor q, Tensor k, Tensor v, Tensor lengths, float scale, int window) -> Tensor",
    _attend_filled_rows_fake,
)
def attend_filled_rows(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    lengths: torch.Tensor,
    scale: float,
    window: int,
) -> torch.Tensor:
    """Softmax attention of each sequence's one query row over its filled cache rows.

    :param q: the queries, (batch, heads, 1, head size).
    :param k: the key cache, (batch, kv heads, rows, head size); kv heads divide heads.
    :param v: the value cache, shaped as ``k``.
    :param lengths: (batch) filled rows of each sequence, its new token's included.
    :param scale: the factor of the scores.
    :param window: the rows a query sees, counted back from its own; 0 or less: all.
    :returns: the attention's output, (batch, heads, 1, head size), contiguous.
    :raises BadInputError: a length outside ``1 .. rows``.
    """
    rows = lengths.reshape(-1).tolist()
    for b, length in enumerate(rows):
        if not 0 < length <= k.shape[2]:
            raise BadInputError(
                f"GroupQueryAttention: seqlens_k {length - 1} of sequence {b} puts its new "
                f"token past the cache's {k.shape[2]} rows"
            )
    if len(rows) == 1:  # the common case, without an output to copy into
        return attend_rows(q, k, v, rows[0], scale, window).contiguous()
    out = q.new_empty(q.shape)
    for b, length in enumerate(rows):
        out[b : b + 1] = attend_rows(
            q[b : b + 1], k[b : b + 1], v[b : b + 1], length, scale, window
        )
    return out


def attend_rows(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, length: int, scale: float, window: int
) -> torch.Tensor:
    """One sequence's attention over its first ``length`` cache rows (the last ``window`` of
    them where ``window`` > 0): ``q`` (1, heads, 1, size), ``k`` and ``v`` (1, kv heads, rows,
    size). Also GroupQueryAttention's eager one-token step, which knows its row already."""
    first = max(0, length - window) if window > 0 else 0
    return torch.nn.functional.scaled_dot_product_attention(
        q, k[:, :, first:length], v[:, :, first:length], scale=scale, enable_gqa=True
    )
