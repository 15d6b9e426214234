"""Choosing the next token from logits: greedy, or sampled with temperature, top-k and top-p.

The filters apply in transformers' order (temperature, then top-k, then top-p) so the same
settings mean the same thing; sampling draws from a ``torch.Generator`` seeded by the caller,
so a seed gives the same tokens on every run on the same device.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sonnx.errors import BadInputError


@dataclass(frozen=True)
class Sampling:
    """How the next token is chosen (``do_sample=False`` is greedy: the others are unused).

    :param do_sample: True draws from the filtered distribution, False takes the most likely
        token.
    :param temperature: the logits are divided by it (> 0; below 1 sharpens, above 1 flattens).
    :param top_k: keep only the ``top_k`` most likely tokens (0: all).
    :param top_p: keep the most likely tokens whose probabilities sum to ``top_p``, in (0, 1].
    :raises BadInputError: ``temperature``, ``top_k`` or ``top_p`` is out of range.
    """

    do_sample: bool = False
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self) -> None:
        if not self.temperature > 0:
            raise BadInputError(f"generate: temperature must be > 0, received {self.temperature}")
        if self.top_k < 0:
            raise BadInputError(f"generate: top_k must be >= 0 (0: off), received {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise BadInputError(f"generate: top_p must be in (0, 1], received {self.top_p}")

    def filtered(self, logits: torch.Tensor) -> torch.Tensor:
        """``logits`` (batch, vocab) scaled by the temperature, with tokens outside top-k and
        top-p set to -inf.

        :param logits: the (batch, vocab) scores of the next token.
        :returns: the filtered (batch, vocab) logits.
        """
        logits = logits / self.temperature if self.temperature != 1.0 else logits
        if self.top_k and self.top_k < logits.shape[-1]:
            kth = torch.topk(logits, self.top_k, dim=-1).values[..., -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        if self.top_p < 1.0:
            ordered, order = torch.sort(logits, descending=True, dim=-1)
            mass = ordered.softmax(-1).cumsum(-1)
            # Drop a token once the mass before it already reaches top_p (the first always stays).
            drop = (mass - ordered.softmax(-1)) >= self.top_p
            logits = logits.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
        return logits

    def next_tokens(self, logits: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        """One token per row of ``logits`` (batch, vocab).

        :param logits: the (batch, vocab) scores of the next token.
        :param generator: the random generator sampling draws from (None: torch's global one).
        :returns: the (batch,) chosen token ids.
        """
        if not self.do_sample:
            return logits.argmax(-1)
        probs = self.filtered(logits.float()).softmax(-1)
        return torch.multinomial(probs, 1, generator=generator).squeeze(-1)
