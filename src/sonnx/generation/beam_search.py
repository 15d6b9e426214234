"""Beam search over a :class:`~sonnx.generation.decoder.Decoder`, as transformers scores it.

Each prompt keeps ``num_beams`` live sequences ranked by their summed log-probabilities. Every
step looks at the best ``2 * num_beams`` continuations of all beams of a prompt: one ending in
an end token (while among the first ``num_beams``) becomes a finished hypothesis scored by its
sum divided by its length (``length_penalty`` 1), the others fill the next beams. A prompt is
done once it holds ``num_beams`` hypotheses and no live beam could beat the worst of them;
at the end, live beams count as hypotheses too, and the best one is returned. The cache rows
follow their beams by ``index_select`` on the device.

A caller that may give up on a search (a server whose client went away) passes ``stop``: it is
asked before every decode step, and :class:`BeamSearchCancelledError` ends the search when it
says so.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from sonnx.engine.tracing import deferred_checks
from sonnx.generation.decoder import Decoder


class _Hypotheses:
    """The finished sequences of one prompt, best ``size`` kept."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.kept: list[tuple[float, torch.Tensor]] = []

    def add(self, tokens: torch.Tensor, summed: float) -> None:
        self.kept.append((summed / tokens.shape[0], tokens))
        self.kept.sort(key=lambda h: -h[0])
        del self.kept[self.size :]

    def done(self, best_live: float, length: int) -> bool:
        return len(self.kept) == self.size and best_live / length <= self.kept[-1][0]

    def best(self) -> torch.Tensor:
        return self.kept[0][1]


class BeamSearchCancelledError(Exception):
    """A beam search ended before its result because its ``stop`` callback asked it to."""


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
    stop: Callable[[], bool] | None = None,
) -> torch.Tensor:
    """The best continuation of each prompt, (batch, new) with ``pad`` after shorter ones.
    ``left_padded``: whether ``mask`` has padding (see :meth:`Decoder.step`).

    :raises BeamSearchCancelledError: ``stop`` returned True before a decode step."""
    batch, prompt = ids.shape
    device = decoder.device
    beams = num_beams
    ids, mask = ids.repeat_interleave(beams, 0), mask.repeat_interleave(beams, 0)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = decoder.empty_cache(batch * beams, prompt + max_new_tokens)
    logits, cache = decoder.step(ids, mask, positions, cache, left_padded=left_padded)
    # Only the first beam of each prompt starts live, so the first step picks distinct tokens.
    scores = torch.full((batch, beams), -1e9, device=device)
    scores[:, 0] = 0
    tokens = torch.zeros(batch * beams, 0, dtype=torch.int64, device=device)
    found = [_Hypotheses(beams) for _ in range(batch)]
    done = [False] * batch
    end_set = set(ends)
    # The decode steps' value checks are read once, after the loop (their tokens are the
    # model's own choices), as the greedy loop does.
    with deferred_checks():
        for step in range(max_new_tokens):
            logp = logits.log_softmax(-1)
            vocab = logp.shape[-1]
            total = (scores.reshape(-1, 1) + logp).reshape(batch, beams * vocab)
            top_scores, top_index = torch.topk(total, 2 * beams, dim=1)
            # The step's one read: the host picks the beams. float64 holds both the float32
            # scores and the indices exactly.
            top_scores, top_index = torch.stack([top_scores.double(), top_index.double()]).tolist()
            next_scores, next_rows, next_tokens = [], [], []
            for b in range(batch):
                chosen: list[tuple[float, int, int]] = []
                for rank, (s, i) in enumerate(zip(top_scores[b], top_index[b], strict=True)):
                    row, token = b * beams + int(i) // vocab, int(i) % vocab
                    if token in end_set and not done[b]:
                        if rank < beams:
                            found[b].add(torch.cat([tokens[row], tokens.new_tensor([token])]), s)
                        continue
                    chosen.append((s, row, token))
                    if len(chosen) == beams:
                        break
                if done[b] or found[b].done(chosen[0][0], step + 1):
                    done[b] = True
                    chosen = [(0.0, b * beams, pad)] * beams
                for s, row, token in chosen:
                    next_scores.append(s)
                    next_rows.append(row)
                    next_tokens.append(token)
            rows = torch.tensor(next_rows, device=device)
            new = torch.tensor(next_tokens, device=device)
            tokens = torch.cat([tokens.index_select(0, rows), new[:, None]], 1)
            scores = torch.tensor(next_scores, device=device).reshape(batch, beams)
            if all(done) or step == max_new_tokens - 1:
                break
            if stop is not None and stop():
                raise BeamSearchCancelledError(f"after {step + 1} of {max_new_tokens} steps")
            cache = cache.select(rows)
            mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], 1)
            positions = positions.index_select(0, rows)[:, -1:] + 1
            logits, cache = decoder.step(
                new[:, None], mask, positions, cache, left_padded=left_padded
            )
    for b in range(batch):
        if not done[b]:
            for k in range(beams):  # the last step's scores, as the host chose them
                found[b].add(tokens[b * beams + k], next_scores[b * beams + k])
    best = [found[b].best() for b in range(batch)]
    width = max(t.shape[0] for t in best)
    out = torch.full((batch, width), pad, dtype=torch.int64, device=device)
    for b, t in enumerate(best):
        out[b, : t.shape[0]] = t
    return out
