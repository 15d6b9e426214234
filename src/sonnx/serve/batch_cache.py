"""The KV caches of a decode batch: where the running sequences' past lives between steps.

A :class:`~sonnx.serve.decode_scheduler.DecodeScheduler` feeds all running sequences their last
token in one step. Row ``i`` of the batch is its ``i``-th running sequence; sequences join
after their prefill (``join``), and the scheduler says which rows stay after each step
(``retain``), taking their new order back to keep its own list in step with the rows, and
which rows take on others' caches (``reorder``: beam search's beams following each other).

Two ways of holding the caches, chosen by :func:`batch_cache` from the graph's layout:

- :class:`SharedBatchBuffer`, for GroupQueryAttention graphs with onnxruntime-genai's shared
  buffer (``past_present_share_buffer``): one preallocated buffer per layer, a row per running
  sequence and as many cache rows as the longest running sequence may reach (not the model's
  maximum length: attention runs over every row of the buffer, masked); the graph writes each
  step's keys and values into it in place, so a decode step copies no cache. A joining
  sequence's prompt cache is copied into the next free row once; a leaving one's row is filled
  with the last row (one row copied), so the rows in use stay ``0 .. n-1`` and each step feeds
  the buffer's first ``n`` rows, a view.
- :class:`PaddedCaches`, for every other graph (optimum's exports ``Concat`` past and new rows,
  so the present is a new tensor each step whatever is fed): each sequence keeps its own cache,
  and each step pads them to one length and concatenates them. Where the graph concatenates
  (left padding), a cache is padded with zero rows on the left and the attention mask is 0 on
  them, so they are masked out as left padding is. Where the graph takes padding on the right
  (GroupQueryAttention with a growing past), caches are padded on the right and the mask
  covers each sequence's own length: the graph reads a sequence's length from its mask, and
  rows past it are never attended to. Afterwards each sequence keeps its own rows of the
  present.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from sonnx.generation.decoder import Cache, Decoder

__all__ = ["Joining", "PaddedCaches", "SharedBatchBuffer", "batch_cache"]


def batch_cache(decoder: Decoder, max_rows: int) -> SharedBatchBuffer | PaddedCaches:
    """The batch cache for ``decoder``'s graph, for up to ``max_rows`` running sequences."""
    lay = decoder.layout
    if lay.share_buffer and lay.right_padded:
        return SharedBatchBuffer(decoder, max_rows)
    return PaddedCaches(decoder)


@dataclass(frozen=True)
class Joining:
    """A prefilled sequence joining the batch: its cache (batch 1), the ``length`` rows of it
    filled, and the most cache rows it may reach (``capacity``: prompt plus new tokens)."""

    cache: Cache
    length: int
    capacity: int


def _kept_in_order(keep: list[bool]) -> list[int]:
    return [i for i, k in enumerate(keep) if k]


def _right_padded_mask(lengths: list[int], device: torch.device) -> torch.Tensor:
    """The mask of one new token after each sequence's ``length`` cached rows: 1s from the
    start over its ``length + 1`` rows, 0s after."""
    last = torch.tensor(lengths, device=device).reshape(-1, 1)
    return (torch.arange(max(lengths) + 1, device=device) <= last).to(torch.int64)


class SharedBatchBuffer:
    """The running sequences' caches as one buffer per layer that the graph writes in place
    (see the module docstring).

    The buffers are allocated when the first sequence joins and dropped when the last one
    leaves; they grow (one copy of the rows in use) only when a joining sequence finds no free
    row, or may reach more cache rows than they hold.
    """

    def __init__(self, decoder: Decoder, max_rows: int) -> None:
        self.decoder = decoder
        self.max_rows = max_rows
        self.rows = 0  # rows in use: 0 .. rows - 1
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []

    def cache(self) -> Cache:
        """The rows in use, as views of the buffers (what a step feeds and the graph writes)."""
        return Cache([k[: self.rows] for k in self.keys], [v[: self.rows] for v in self.values])

    def join(self, joining: list[Joining]) -> None:
        """Take prefilled sequences as the next rows, each one's filled cache rows copied
        once."""
        self._make_room(self.rows + len(joining), max(j.capacity for j in joining))
        for j in joining:
            pairs = zip(self.keys + self.values, j.cache.keys + j.cache.values, strict=True)
            for mine, its in pairs:
                mine[self.rows, :, : j.length] = its[0, :, : j.length]
            self.rows += 1

    def retain(self, keep: list[bool]) -> list[int]:
        """Keep the rows marked in ``keep``: the rows in use become ``0 .. kept - 1``, each
        leaving row filled with a kept row from past that range. Returns which old row each
        row now holds."""
        kept = len(_kept_in_order(keep))
        movers = [i for i in _kept_in_order(keep) if i >= kept]
        holes = [i for i in range(kept) if not keep[i]]
        for hole, mover in zip(holes, movers, strict=True):
            for buffer in self.keys + self.values:
                buffer[hole] = buffer[mover]
        order = list(range(kept))
        for hole, mover in zip(holes, movers, strict=True):
            order[hole] = mover
        self.rows = kept
        if not kept:  # nothing runs: give the memory back
            self.keys, self.values = [], []
        return order

    def reorder(self, into: list[int], take: list[int]) -> None:
        """Rows ``into`` take the caches of rows ``take`` (beams continuing other beams'
        pasts); every row is read before any is written."""
        device = self.keys[0].device
        into_rows, take_rows = torch.tensor(into, device=device), torch.tensor(take, device=device)
        for buffer in self.keys + self.values:
            buffer[into_rows] = buffer[take_rows]

    def step(self, ids: torch.Tensor, lengths: list[int]) -> torch.Tensor:
        """One decode step of the rows in use: ``ids`` (rows, 1) at positions ``lengths`` (each
        sequence's cached rows). Returns the logits (rows, vocab); the graph has written the
        new keys and values into the buffers."""
        mask = _right_padded_mask(lengths, ids.device)
        positions = torch.tensor(lengths, device=ids.device).reshape(-1, 1)
        logits, _ = self.decoder.step(ids, mask, positions, self.cache(), left_padded=False)
        return logits

    def _make_room(self, rows: int, capacity: int) -> None:
        """Buffers of at least ``rows`` rows and ``capacity`` cache rows, the rows in use kept.
        Rows grow by doubling (up to ``max_rows``), so joins seldom copy the batch."""
        held_rows = self.keys[0].shape[0] if self.keys else 0
        held_length = self.keys[0].shape[2] if self.keys else 0
        if rows <= held_rows and capacity <= held_length:
            return
        new_rows = max(rows, min(2 * held_rows, self.max_rows))
        fresh = self.decoder.empty_cache(new_rows, max(capacity, held_length))
        if self.rows:
            for old, new in zip(self.keys + self.values, fresh.keys + fresh.values, strict=True):
                new[: self.rows, :, :held_length] = old[: self.rows]
        self.keys, self.values = fresh.keys, fresh.values


class PaddedCaches:
    """Each running sequence's cache as its own tensors, padded and concatenated into a batch
    each step (see the module docstring)."""

    def __init__(self, decoder: Decoder) -> None:
        self.decoder = decoder
        self.caches: list[Cache] = []

    def join(self, joining: list[Joining]) -> None:
        """Take prefilled sequences as the next rows (their capacity plays no part: these
        caches grow)."""
        self.caches.extend(j.cache for j in joining)

    def retain(self, keep: list[bool]) -> list[int]:
        """Keep the rows marked in ``keep``, in order; returns their old indices."""
        order = _kept_in_order(keep)
        self.caches = [self.caches[i] for i in order]
        return order

    def reorder(self, into: list[int], take: list[int]) -> None:
        """Rows ``into`` take the caches of rows ``take`` (beams continuing other beams'
        pasts)."""
        caches = list(self.caches)
        for row, source in zip(into, take, strict=True):
            self.caches[row] = caches[source]

    def step(self, ids: torch.Tensor, lengths: list[int]) -> torch.Tensor:
        """One decode step of every sequence: ``ids`` (rows, 1) at positions ``lengths`` (each
        sequence's cached rows). Returns the logits (rows, vocab); each sequence keeps its
        rows of the present."""
        positions = torch.tensor(lengths, device=ids.device).reshape(-1, 1)
        if self.decoder.layout.right_padded:
            mask, cache, rows = self._right_padded(lengths, ids.device)
        else:
            mask, cache, rows = self._left_padded(lengths, ids.device)
        logits, present = self.decoder.step(ids, mask, positions, cache)
        self.caches = [
            Cache(
                [k[b : b + 1, :, rows[b]] for k in present.keys],
                [v[b : b + 1, :, rows[b]] for v in present.values],
            )
            for b in range(len(lengths))
        ]
        return logits

    def _left_padded(
        self, lengths: list[int], device: torch.device
    ) -> tuple[torch.Tensor, Cache, list[slice]]:
        longest = max(lengths)
        pads = [longest - n for n in lengths]
        mask = (
            torch.arange(longest + 1, device=device) >= torch.tensor(pads, device=device)[:, None]
        ).to(torch.int64)

        def merged(caches: list[torch.Tensor]) -> torch.Tensor:
            pairs = zip(caches, pads, strict=True)
            return torch.cat([torch.nn.functional.pad(c, (0, 0, p, 0)) for c, p in pairs], 0)

        return mask, self._merged(merged), [slice(p, None) for p in pads]

    def _right_padded(
        self, lengths: list[int], device: torch.device
    ) -> tuple[torch.Tensor, Cache, list[slice]]:
        sizes = [c.keys[0].shape[2] for c in self.caches]
        widest = max(sizes)

        def merged(caches: list[torch.Tensor]) -> torch.Tensor:
            return torch.cat(
                [torch.nn.functional.pad(c, (0, 0, 0, widest - c.shape[2])) for c in caches], 0
            )

        # A sequence keeps its rows and the new one.
        kept = [max(size, n + 1) for size, n in zip(sizes, lengths, strict=True)]
        mask = _right_padded_mask(lengths, device)
        return mask, self._merged(merged), [slice(0, k) for k in kept]

    def _merged(self, merge: Callable[[list[torch.Tensor]], torch.Tensor]) -> Cache:
        layers = range(self.decoder.layout.layers)
        return Cache(
            [merge([c.keys[i] for c in self.caches]) for i in layers],
            [merge([c.values[i] for c in self.caches]) for i in layers],
        )
