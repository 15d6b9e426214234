"""One forward step of a decoder graph with its KV cache held as torch tensors on the device.

:class:`Decoder` feeds a prepared :class:`~sonnx.runtime.rep.SingaRep` the new tokens, the
attention mask, the positions and the past, and keeps the present it returns as the next
step's past: the cache never leaves the device and is never converted to NumPy; only the
logits of each sequence's last position are handed back.

Preallocation: where the graph writes the present into a past buffer of the full length
(genai's ``past_present_share_buffer``, GroupQueryAttention graphs), the past starts as one
buffer of ``max_length`` rows per layer, and each step runs with
:data:`~sonnx.run_state.CACHES_IN_PLACE` on: GroupQueryAttention writes the new rows into that
buffer, which is the present, so no step copies a cache (and, fed a mask of the buffer's full
width, every decode step has the same shapes: :mod:`~sonnx.generation.decode_steps`). The
buffers are the decoder's own (never a caller's arrays): a :class:`Cache` fed to
:meth:`Decoder.step` of such a layout is spent, and the returned one takes its place. Graphs
that ``Concat`` the past and the new rows (every optimum export) make a new present each step
whatever is fed, so there is nothing to preallocate: the past starts empty and grows by one
row per step.

Callers pad on the left (0s in the attention mask before a sequence's tokens). For a graph
that takes padding on the right (GroupQueryAttention: see
:mod:`~sonnx.generation.cache_layout`), :meth:`Decoder.step` moves a padded prompt's tokens to
the front and marks each sequence's length by 1s from the mask's start, so both layouts take
the same calls. :meth:`Decoder.feed` and :meth:`Decoder.run` are a step's two halves without
that: the inputs as given, and the run (what a CUDA-graph capture takes in between).

Where the graph's language-model head is found, the decoder runs a rewrite of it that computes
the logits of each sequence's last position only (:mod:`~sonnx.generation.head_rows`): a
prompt's head is one row per sequence instead of one per token.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from sonnx.generation.cache_layout import CacheLayout
from sonnx.generation.head_rows import KEPT_ROWS, head_on_kept_rows
from sonnx.run_state import CACHES_IN_PLACE
from sonnx.tensor import Tensor, computed_tensor

if TYPE_CHECKING:
    from sonnx.runtime.rep import SingaRep


@dataclass
class Cache:
    """The past keys and values of every layer, (batch, kv heads, rows, head size) each."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]

    def select(self, rows: torch.Tensor) -> Cache:
        """The cache of the batch rows ``rows`` (beam search's reordering)."""
        return Cache(
            [k.index_select(0, rows) for k in self.keys],
            [v.index_select(0, rows) for v in self.values],
        )


class Decoder:
    """Runs ``rep`` one step at a time under the names ``layout`` gives: or its rewrite with
    the head on each sequence's last position (:attr:`rep` is what runs)."""

    def __init__(self, rep: SingaRep, layout: CacheLayout) -> None:
        kept = head_on_kept_rows(rep, layout.logits)
        self.rep = rep if kept is None else kept
        self.kept_rows = kept is not None
        self.layout = layout
        self.device = rep.device.torch_device
        specs = {s.name: s for s in rep.input_specs}
        self._int_dtype = {
            name: specs[name].dtype or torch.int64
            for name in (layout.input_ids, layout.attention_mask, layout.position_ids)
            if name is not None
        }

    def empty_cache(self, batch: int, max_length: int) -> Cache:
        """The past before the prompt: ``max_length`` zero rows when the graph shares the
        buffer, else none."""
        lay = self.layout
        rows = max_length if lay.share_buffer else 0
        shape = (batch, lay.kv_heads, rows, lay.head_size)

        def zeros() -> torch.Tensor:
            return torch.zeros(shape, dtype=lay.cache_dtype, device=self.device)

        return Cache([zeros() for _ in range(lay.layers)], [zeros() for _ in range(lay.layers)])

    def step(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        cache: Cache,
        *,
        left_padded: bool = True,
    ) -> tuple[torch.Tensor, Cache]:
        """The float32 logits of each row's last position (batch, vocab) and the new cache.

        ``input_ids`` and ``position_ids`` are (batch, new tokens); ``attention_mask`` is
        (batch, past + new tokens), 0 on left padding. With a shared buffer
        (``layout.share_buffer``) the new rows are written into ``cache``'s tensors.

        ``left_padded`` says whether the mask may have 0s before a row's tokens: the caller
        knows it from how it built the mask (left padding is known when the prompts are, and
        every decode step adds a column of 1s). False skips moving the tokens to the right for
        a right-padded graph; True is always correct (moving a mask of 1s changes nothing),
        only slower. The mask is never read back to find out: on a GPU that read would wait
        for the device at every step.
        """
        lay = self.layout
        last = None
        if lay.right_padded and left_padded:
            input_ids, attention_mask, position_ids, last = _to_right_padding(
                input_ids, attention_mask, position_ids
            )
        outputs = self.run(self.feed(input_ids, attention_mask, position_ids, cache, last))
        # The rewrite computed the rows of ``last`` alone.
        chosen = None if self.kept_rows else last
        return last_logits(outputs[lay.logits], chosen), self.present(outputs)

    def feed(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        cache: Cache,
        last: torch.Tensor | None = None,
    ) -> dict[str, Tensor]:
        """The graph's inputs by name, as given (no padding moved): the tokens, the mask and
        the positions in the graph's integer types, the cache's tensors themselves, and for
        the rewrite the row whose logits each sequence needs: ``last`` (batch,), or the final
        one (None)."""
        lay = self.layout
        feed: dict[str, Tensor] = {lay.input_ids: self._int(lay.input_ids, input_ids)}
        if self.kept_rows:
            batch, new = input_ids.shape
            rows = torch.full((batch,), new - 1, device=self.device) if last is None else last
            feed[KEPT_ROWS] = computed_tensor(rows.to(device=self.device, dtype=torch.int64))
        if lay.attention_mask is not None:
            feed[lay.attention_mask] = self._int(lay.attention_mask, attention_mask)
        if lay.position_ids is not None:
            feed[lay.position_ids] = self._int(lay.position_ids, position_ids)
        if lay.use_cache_branch is not None:
            has_past = attention_mask.shape[1] > input_ids.shape[1]
            feed[lay.use_cache_branch] = computed_tensor(
                torch.tensor([has_past], device=self.device)
            )
        for names, tensors in ((lay.past_keys, cache.keys), (lay.past_values, cache.values)):
            feed.update({n: computed_tensor(t) for n, t in zip(names, tensors, strict=True)})
        return feed

    def run(self, feed: dict[str, Tensor]) -> dict[str, torch.Tensor]:
        """The graph's outputs by name for ``feed``, computed without autograd and with a
        shared buffer written in place."""
        with self.caches_in_place(), torch.no_grad():
            out = self.rep.run(feed)
        return {name: t.data for name, t in zip(self.rep.outputs, out, strict=True)}

    def present(self, outputs: dict[str, torch.Tensor]) -> Cache:
        """The present cache among a run's ``outputs`` (by name)."""
        keys, values = self.layout.present_keys, self.layout.present_values
        return Cache([outputs[n] for n in keys], [outputs[n] for n in values])

    @contextmanager
    def caches_in_place(self) -> Iterator[None]:
        """Runs in this block write a shared buffer's new rows in place
        (:data:`~sonnx.run_state.CACHES_IN_PLACE`, on where ``layout.share_buffer``)."""
        token = CACHES_IN_PLACE.set(self.layout.share_buffer)
        try:
            yield
        finally:
            CACHES_IN_PLACE.reset(token)

    def _int(self, name: str, values: torch.Tensor) -> Tensor:
        return computed_tensor(values.to(device=self.device, dtype=self._int_dtype[name]))


def last_logits(logits: torch.Tensor, last: torch.Tensor | None = None) -> torch.Tensor:
    """The float32 logits (batch, vocab) of each row's last token.

    :param logits: a step's logits, (batch, new tokens, vocab), or (batch, vocab) from a graph
        that returns the last position's only.
    :param last: (batch,) each row's last token among the new positions; None: the final
        position (left padding, or one new token).
    :returns: the logits, float32.
    """
    if logits.dim() == 3:
        if last is None:
            logits = logits[:, -1]
        else:
            logits = logits[torch.arange(logits.shape[0], device=logits.device), last]
    return logits.float()


def tokens_first(attention_mask: torch.Tensor) -> torch.Tensor:
    """The (batch, length) positions that put each row's tokens (mask 1) first, in their
    order, and its padding (mask 0) after them: ``x.gather(1, order)`` makes a left-padded
    row right-padded, as GroupQueryAttention graphs take it (see the module docstring and
    :mod:`~sonnx.lora.causal_lm`)."""
    return torch.argsort((attention_mask == 0).int(), dim=1, stable=True)


def _to_right_padding(
    input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Left-padded inputs as a right-padded graph takes them, and the index of each row's last
    token among the new ones (None: the last position, as with one new token)."""
    valid = attention_mask.sum(1, keepdim=True)
    width = attention_mask.shape[1]
    mask = (torch.arange(width, device=valid.device) < valid).to(attention_mask.dtype)
    if input_ids.shape[1] == 1:
        return input_ids, mask, position_ids, None
    # A prompt (no past): each row's tokens first, in order, then its padding.
    new = input_ids.shape[1]
    order = tokens_first(attention_mask[:, -new:])
    ids = input_ids.gather(1, order)
    positions = position_ids.gather(1, order)
    return ids, mask, positions, (valid.reshape(-1) - (width - new) - 1)
