"""Beam search over a :class:`~sonnx.generation.decoder.Decoder`, as transformers scores it.

Each prompt keeps ``num_beams`` live sequences ranked by their summed log-probabilities. Every
step looks at the best ``2 * num_beams`` continuations of all beams of a prompt: one ending in
an end token (while among the first ``num_beams``) becomes a finished hypothesis scored by its
sum divided by its length (``length_penalty`` 1), the others fill the next beams. A prompt is
done once it holds ``num_beams`` hypotheses and no live beam could beat the worst of them;
at the end, live beams count as hypotheses too, and the best one is returned.

:class:`PromptBeams` is one prompt's search, step by step: :func:`beam_search` runs one per
prompt of a batch, and the serving scheduler one per beam request among its other rows. Each
step's choice is read back to the host once (the host picks the beams); the cache rows follow
their beams on the device (``index_select`` here, row copies in the scheduler's batch).
"""

from __future__ import annotations

from collections.abc import Collection

import torch

from sonnx.engine.tracing import deferred_checks
from sonnx.generation.decoder import Decoder


class _Hypotheses:
    """The finished sequences of one prompt, best ``size`` kept."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.kept: list[tuple[float, list[int]]] = []

    def add(self, tokens: list[int], summed: float) -> None:
        self.kept.append((summed / len(tokens), tokens))
        self.kept.sort(key=lambda h: -h[0])
        del self.kept[self.size :]

    def done(self, best_live: float, length: int) -> bool:
        return len(self.kept) == self.size and best_live / length <= self.kept[-1][0]

    def best(self) -> list[int]:
        return self.kept[0][1]


class PromptBeams:
    """One prompt's beam search: its live beams' tokens and summed log-probabilities, and its
    finished hypotheses (see the module docstring).

    Each step, :meth:`top` ranks the continuations of the beams' logits on the device, the
    caller reads that back (with whatever else the step reads, in one read) and hands it to
    :meth:`advance`, which picks the next beams; :meth:`finish` gives the result.
    """

    def __init__(self, num_beams: int, ends: Collection[int]) -> None:
        self.size = num_beams
        self.ends = frozenset(ends)
        #: The live beams' new tokens so far, beam by beam.
        self.tokens: list[list[int]] = [[] for _ in range(num_beams)]
        # Only the first beam starts live, so the first step picks distinct tokens.
        self.scores = [0.0] + [-1e9] * (num_beams - 1)
        self.found = _Hypotheses(num_beams)
        #: No live beam can beat the hypotheses found: the search is over.
        self.done = False

    def top(self, logits: torch.Tensor) -> torch.Tensor:
        """The best ``2 * num_beams`` continuations of the beams whose logits are ``logits``
        (num_beams, vocab), as one float64 tensor on the device: their summed scores, then
        their indices into (beam, token) flattened. float64 holds both the float32 scores and
        the indices exactly."""
        logp = logits.log_softmax(-1)
        scores = torch.tensor(self.scores, device=logits.device)
        total = (scores[:, None] + logp).reshape(-1)
        best, index = torch.topk(total, 2 * self.size)
        return torch.cat([best.double(), index.double()])

    def advance(self, top: list[float], vocab: int) -> list[int]:
        """Take a step's choices, :meth:`top` read back: the next beams, or ``done``. Returns
        the beam each next beam continues (whose cache rows it takes on; empty once done); its
        new token is the last of ``tokens[beam]``."""
        size = 2 * self.size
        length = len(self.tokens[0]) + 1
        chosen: list[tuple[float, int, int]] = []
        for rank, (s, i) in enumerate(zip(top[:size], top[size:], strict=True)):
            beam, token = int(i) // vocab, int(i) % vocab
            if token in self.ends:
                if rank < self.size:
                    self.found.add([*self.tokens[beam], token], s)
                continue
            chosen.append((s, beam, token))
            if len(chosen) == self.size:
                break
        if self.found.done(chosen[0][0], length):
            self.done = True
            return []
        self.tokens = [[*self.tokens[beam], token] for _, beam, token in chosen]
        self.scores = [s for s, _, _ in chosen]
        return [beam for _, beam, _ in chosen]

    def finish(self) -> list[int]:
        """The best hypothesis, the live beams counted as hypotheses unless the search was
        done. Call once, after the last step."""
        if not self.done:
            for tokens, summed in zip(self.tokens, self.scores, strict=True):
                self.found.add(tokens, summed)
        return self.found.best()


def beam_search_conflict(num_beams: int, do_sample: bool, streams: bool) -> str | None:
    """Why a request for ``num_beams`` cannot run as asked (None: it can): beam search neither
    samples nor streams its tokens (they are known only when the search ends).

    :param num_beams: the beams asked for; 1 is no beam search.
    :param do_sample: whether sampling was asked for too.
    :param streams: whether a streamer was given.
    :returns: the message for the caller's typed error, or None.
    """
    if num_beams <= 1 or not (do_sample or streams):
        return None
    asked = " and ".join(w for w, on in (("do_sample", do_sample), ("the streamer", streams)) if on)
    return (
        f"generate: num_beams={num_beams} is beam search, which does not sample or stream; "
        f"drop {asked}"
    )


def beam_search(
    decoder: Decoder,
    ids: torch.Tensor,
    mask: torch.Tensor,
    num_beams: int,
    max_new_tokens: int,
    ends: list[int],
    pad: int,
    left_padded: bool = True,
) -> torch.Tensor:
    """The best continuation of each prompt, (batch, new) with ``pad`` after shorter ones.
    ``left_padded``: whether ``mask`` has padding (see :meth:`Decoder.step`)."""
    batch, prompt = ids.shape
    device = decoder.device
    beams = num_beams
    ids, mask = ids.repeat_interleave(beams, 0), mask.repeat_interleave(beams, 0)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = decoder.empty_cache(batch * beams, prompt + max_new_tokens)
    logits, cache = decoder.step(ids, mask, positions, cache, left_padded=left_padded)
    searches = [PromptBeams(beams, ends) for _ in range(batch)]
    # The decode steps' value checks are read once, after the loop (their tokens are the
    # model's own choices), as the greedy loop does.
    with deferred_checks():
        for step in range(max_new_tokens):
            live = [b for b, search in enumerate(searches) if not search.done]
            tops = torch.stack([searches[b].top(logits[b * beams : (b + 1) * beams]) for b in live])
            chosen = dict(zip(live, tops.tolist(), strict=True))  # the step's one read
            rows, new = [], []
            for b, search in enumerate(searches):
                follows = [] if search.done else search.advance(chosen[b], logits.shape[-1])
                # A prompt that is done feeds padding along with the others.
                rows += [b * beams + f for f in follows] or [b * beams] * beams
                new += [t[-1] for t in search.tokens] if follows else [pad] * beams
            if all(s.done for s in searches) or step == max_new_tokens - 1:
                break
            index = torch.tensor(rows, device=device)
            tokens = torch.tensor(new, device=device)[:, None]
            cache = cache.select(index)
            mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], 1)
            positions = positions.index_select(0, index)[:, -1:] + 1
            logits, cache = decoder.step(tokens, mask, positions, cache, left_padded=left_padded)
    best = [search.finish() for search in searches]
    out = torch.full((batch, max(len(t) for t in best)), pad, dtype=torch.int64)
    for b, t in enumerate(best):
        out[b, : len(t)] = torch.tensor(t)
    return out.to(device)
