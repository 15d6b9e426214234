"""``DistOpt``: data-parallel training over torch.distributed with SINGA's five update modes.

Every process runs the same model on its own shard of each batch; ``DistOpt`` wraps any sonnx
optimizer and synchronises before (or, for partial updates, after) applying it:

- ``backward_and_update`` (``fp32``): all-reduce of the gradients, fused into buckets of at
  most ``threshold`` elements, averaged, then applied;
- ``backward_and_update_half`` (``fp16``): the same with float16 communication (optionally
  clipped first), applied to float32 master weights;
- ``backward_and_partial_update`` (``partialUpdate``): local updates; each step one rotating
  chunk of the parameters is averaged across processes;
- ``backward_and_sparse_update`` (``sparseTopK`` / ``sparseThreshold``): only the largest
  ``spars`` fraction of each bucket (top-k) or the elements with ``|g| >= spars`` are
  exchanged; with ``corr`` what was not sent accumulates locally and is added next step.

With one process all of them reduce to plain local training. :attr:`DistOpt.last_step` counts
what this process sent in the last step.

The wrapped optimizer's ``loss_scaler`` (float16 training) applies in every mode: the loss is
scaled, the exchanged gradients are unscaled before the update, and a step is skipped when one
is inf or NaN. The all-reduce spreads an overflow to every process, so they all skip together
(in the partial and sparse modes, whose updates are local or exchange only part, each process
decides on its own gradients).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as tdist

from sonnx import dist
from sonnx.errors import BadInputError
from sonnx.opt.optimizer import Optimizer
from sonnx.tensor import Tensor

DEFAULT_THRESHOLD = 2**21  # elements per fused communication bucket


@dataclass
class CommStats:
    """What this process sent in one step: bytes, gradient elements, of how many in total."""

    bytes_sent: int = 0
    elements_sent: int = 0
    elements_total: int = 0

    @property
    def fraction(self) -> float:
        return self.elements_sent / self.elements_total if self.elements_total else 0.0


def _buckets(sizes: Sequence[int], threshold: int) -> list[list[int]]:
    """Consecutive index groups whose sizes add up to at most ``threshold`` (a larger tensor
    forms a bucket of its own)."""
    groups: list[list[int]] = []
    current: list[int] = []
    filled = 0
    for i, n in enumerate(sizes):
        if current and filled + n > threshold:
            groups.append(current)
            current, filled = [], 0
        current.append(i)
        filled += n
    if current:
        groups.append(current)
    return groups


class DistOpt:
    """Wrap ``optimizer`` for data-parallel training (see the module docstring).

    Joins the process group on construction (torchrun's environment, or the arguments);
    ``dist_opt(loss)`` is :meth:`backward_and_update`.

    :param optimizer: the optimizer every process applies.
    :param world_size: the number of processes (None: ``WORLD_SIZE``, else 1).
    :param rank: this process's rank (None: ``RANK``, else 0).
    :param local_rank: this process's rank on its machine (None: ``LOCAL_RANK``, else 0).
    :param backend: the torch.distributed backend (None: ``nccl`` with CUDA, else ``gloo``).
    :param buff_size: the most elements in one fused communication bucket.
    :param timeout: seconds a collective waits for a peer before failing.
    :raises BadInputError: ``optimizer`` is not a sonnx optimizer, ``buff_size`` < 1, a rank
        outside ``[0, world_size)``, or ``MASTER_PORT`` unset for several processes.
    :raises DistributedError: this process could not join the group.
    """

    def __init__(
        self,
        optimizer: Optimizer,
        world_size: int | None = None,
        rank: int | None = None,
        local_rank: int | None = None,
        backend: str | None = None,
        buff_size: int = DEFAULT_THRESHOLD,
        timeout: float = dist.DEFAULT_TIMEOUT_SECONDS,
    ) -> None:
        if not isinstance(optimizer, Optimizer):
            raise BadInputError(
                f"DistOpt wraps a sonnx.opt Optimizer, received {type(optimizer).__name__}"
            )
        if buff_size < 1:
            raise BadInputError(f"DistOpt: buff_size must be positive, received {buff_size}")
        self.opt = optimizer
        self.rank, self.world_size = dist.init(world_size, rank, backend, timeout)
        self.local_rank = dist.local_rank() if local_rank is None else int(local_rank)
        self.buff_size = int(buff_size)
        self.last_step = CommStats()
        self._residuals: dict[int, torch.Tensor] = {}
        self._partial_cursor = 0

    # ---- the wrapped optimizer's own API --------------------------------------------------
    def update(self, param: Tensor, grad: Tensor | torch.Tensor) -> None:
        """The wrapped optimizer's :meth:`~sonnx.opt.Optimizer.update` (local, no exchange).

        :param param: the parameter.
        :param grad: its gradient.
        """
        self.opt.update(param, grad)

    def step(self) -> None:
        """The wrapped optimizer's :meth:`~sonnx.opt.Optimizer.step`."""
        self.opt.step()

    def get_states(self) -> dict[str, Tensor]:
        """The wrapped optimizer's states (see :meth:`~sonnx.opt.Optimizer.get_states`).

        :returns: the states by name.
        """
        return self.opt.get_states()

    def set_states(self, states: Any) -> None:
        """Restore the wrapped optimizer's states (see :meth:`~sonnx.opt.Optimizer.set_states`).

        :param states: what :meth:`get_states` returned.
        """
        self.opt.set_states(states)

    def __call__(self, loss: Tensor, threshold: int | None = None) -> None:
        self.backward_and_update(loss, threshold)

    # ---- the five modes -------------------------------------------------------------------
    def backward_and_update(self, loss: Tensor, threshold: int | None = None) -> None:
        """All-reduce (average) the gradients in fused buckets, then update.

        :param loss: the loss, a scalar Tensor computed in training mode.
        :param threshold: the most elements in one fused bucket (None: ``buff_size``).
        :raises DistributedError: a peer process died or stopped responding.
        """
        pairs = self._gradients(loss)
        self.last_step = CommStats(elements_total=sum(g.size() for _, g in pairs))
        self._all_reduce_mean([g.data for _, g in pairs], threshold or self.buff_size, None)
        self._apply(pairs)

    def backward_and_update_half(
        self,
        loss: Tensor,
        threshold: int | None = None,
        clipping: bool = False,
        clip_value: float = 100.0,
    ) -> None:
        """As :meth:`backward_and_update` with float16 communication; float32 master weights.

        ``clipping`` clamps each gradient to ``[-clip_value, clip_value]`` before the cast
        (scaled with the loss under float16 training).

        :param loss: the loss, a scalar Tensor computed in training mode.
        :param threshold: the most elements in one fused bucket (None: ``buff_size``).
        :param clipping: clamp each gradient before the cast.
        :param clip_value: the bound of the clamp.
        :raises DistributedError: a peer process died or stopped responding.
        """
        pairs = self._gradients(loss)
        grads = [g.data for _, g in pairs]
        if clipping:
            scaler = self.opt.loss_scaler
            bound = clip_value * (1.0 if scaler is None else scaler.scale)
            grads = [g.clamp(-bound, bound) for g in grads]
        self.last_step = CommStats(elements_total=sum(g.numel() for g in grads))
        self._all_reduce_mean(grads, threshold or self.buff_size, torch.float16)
        self._apply([(p, g) for (p, _), g in zip(pairs, grads, strict=True)])

    def backward_and_partial_update(self, loss: Tensor, threshold: int | None = None) -> None:
        """Update locally, then average one rotating chunk of the parameters across processes.

        :param loss: the loss, a scalar Tensor computed in training mode.
        :param threshold: the most elements in one chunk (None: ``buff_size``).
        :raises DistributedError: a peer process died or stopped responding.
        """
        pairs = self._gradients(loss)
        self.last_step = CommStats(elements_total=sum(g.size() for _, g in pairs))
        self._apply(pairs)
        if self.world_size == 1 or not pairs:
            return
        params = [p.data for p, _ in pairs]
        chunks = _buckets([p.numel() for p in params], threshold or self.buff_size)
        chunk = chunks[self._partial_cursor % len(chunks)]
        self._partial_cursor += 1
        with torch.no_grad():
            self._reduce_bucket([params[i] for i in chunk], None)

    def backward_and_sparse_update(
        self,
        loss: Tensor,
        threshold: int | None = None,
        spars: float = 0.05,
        topK: bool = False,
        corr: bool = True,
    ) -> None:
        """Exchange only the top ``spars`` fraction (``topK``) or the elements with
        ``|g| >= spars`` of each bucket; with ``corr`` the rest is carried to the next step.

        :param loss: the loss, a scalar Tensor computed in training mode.
        :param threshold: the most elements in one fused bucket (None: ``buff_size``).
        :param spars: with ``topK`` the fraction of elements to send, in (0, 1]; else the
            magnitude an element needs to be sent, >= 0.
        :param topK: send the largest ``spars`` fraction rather than the elements above a
            threshold.
        :param corr: carry what was not sent into the next step's gradients.
        :raises BadInputError: a ``spars`` outside its range.
        :raises DistributedError: a peer process died or stopped responding.
        """
        if topK and not 0.0 < spars <= 1.0:
            raise BadInputError(
                f"backward_and_sparse_update: with topK, spars is the fraction "
                f"of elements to send, in (0, 1]; received {spars}"
            )
        if not topK and spars < 0:
            raise BadInputError(
                f"backward_and_sparse_update: spars is the magnitude threshold "
                f"and must be >= 0, received {spars}"
            )
        pairs = self._gradients(loss)
        grads = [g.data for _, g in pairs]
        self.last_step = CommStats(elements_total=sum(g.numel() for g in grads))
        if self.world_size == 1:  # nothing to exchange: plain local training
            self._apply(pairs)
            return
        for bucket in _buckets([g.numel() for g in grads], threshold or self.buff_size):
            flat = torch.cat([grads[i].reshape(-1) for i in bucket])
            key = id(pairs[bucket[0]][0])
            if corr and key in self._residuals and self._residuals[key].shape == flat.shape:
                flat = flat + self._residuals[key]
            mask = self._select(flat, spars, topK)
            if corr:
                self._residuals[key] = torch.where(mask, torch.zeros_like(flat), flat)
            averaged = self._sparse_all_reduce_mean(flat, mask)
            offset = 0
            for i in bucket:
                n = grads[i].numel()
                grads[i] = averaged[offset : offset + n].view_as(grads[i])
                offset += n
        self._apply([(p, g) for (p, _), g in zip(pairs, grads, strict=True)])

    # ---- communication --------------------------------------------------------------------
    def _gradients(self, loss: Tensor) -> list[tuple[Tensor, Tensor]]:
        params, grads = self.opt.backward(loss)
        pairs = zip(params, grads, strict=True)
        return [(p, Tensor(data=g, requires_grad=False)) for p, g in pairs]

    def _apply(self, pairs: Sequence[tuple[Tensor, Tensor | torch.Tensor]]) -> None:
        params = [p for p, _ in pairs]
        grads = [g.data if isinstance(g, Tensor) else g for _, g in pairs]

        def update() -> None:
            for p, g in zip(params, grads, strict=True):
                self.opt.update(p, g)
            self.opt.step()

        self.opt.guarded_update(params, grads, update)

    def _all_reduce_mean(
        self, grads: list[torch.Tensor], threshold: int, comm_dtype: torch.dtype | None
    ) -> None:
        if self.world_size == 1:
            return
        for bucket in _buckets([g.numel() for g in grads], threshold):
            self._reduce_bucket([grads[i] for i in bucket], comm_dtype)

    def _reduce_bucket(self, tensors: list[torch.Tensor], comm_dtype: torch.dtype | None) -> None:
        """Average ``tensors`` across processes in place through one fused all-reduce."""
        flat = torch.cat([t.reshape(-1) for t in tensors])
        if comm_dtype is not None:
            flat = flat.to(comm_dtype)
        dist.run_collective("all-reduce", tdist.all_reduce, flat)
        self.last_step.bytes_sent += flat.numel() * flat.element_size()
        self.last_step.elements_sent += flat.numel()
        flat = flat.to(tensors[0].dtype) / self.world_size
        offset = 0
        for t in tensors:
            n = t.numel()
            t.copy_(flat[offset : offset + n].view_as(t))
            offset += n

    @staticmethod
    def _select(flat: torch.Tensor, spars: float, top_k: bool) -> torch.Tensor:
        if top_k:
            k = max(1, math.ceil(spars * flat.numel()))
            chosen = torch.topk(flat.abs(), k, sorted=False).indices
            mask = torch.zeros_like(flat, dtype=torch.bool)
            mask[chosen] = True
            return mask
        return flat.abs() >= spars

    def _sparse_all_reduce_mean(self, flat: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The average over processes of each process's selected entries (zeros elsewhere)."""
        index = mask.nonzero().reshape(-1)
        values = flat[index]
        self.last_step.elements_sent += values.numel()
        self.last_step.bytes_sent += values.numel() * (values.element_size() + 4)
        count = torch.tensor([index.numel()], device=flat.device)
        counts = [torch.zeros_like(count) for _ in range(self.world_size)]
        dist.run_collective("all-gather", tdist.all_gather, counts, count)
        longest = int(max(c.item() for c in counts))
        padded_index = torch.zeros(longest, dtype=torch.int32, device=flat.device)
        padded_values = torch.zeros(longest, dtype=flat.dtype, device=flat.device)
        padded_index[: index.numel()] = index.to(torch.int32)
        padded_values[: values.numel()] = values
        all_index = [torch.zeros_like(padded_index) for _ in range(self.world_size)]
        all_values = [torch.zeros_like(padded_values) for _ in range(self.world_size)]
        dist.run_collective("all-gather", tdist.all_gather, all_index, padded_index)
        dist.run_collective("all-gather", tdist.all_gather, all_values, padded_values)
        total = torch.zeros_like(flat)
        for c, idx, val in zip(counts, all_index, all_values, strict=True):
            n = int(c.item())
            total.index_add_(0, idx[:n].to(torch.int64), val[:n])
        return total / self.world_size
