"""The next-token filters on hand-made logits."""

from __future__ import annotations

import pytest
import torch

from sonnx.errors import BadInputError
from sonnx.generation.sampling import Sampling

LOGITS = torch.log(torch.tensor([[0.5, 0.1, 0.3, 0.05, 0.05]]))


def kept(sampling: Sampling) -> list[int]:
    return torch.isfinite(sampling.filtered(LOGITS))[0].nonzero().flatten().tolist()


def test_top_k_keeps_the_k_largest() -> None:
    assert kept(Sampling(True, top_k=2)) == [0, 2]


def test_top_p_keeps_the_smallest_set_reaching_p() -> None:
    assert kept(Sampling(True, top_p=0.75)) == [0, 2]
    assert kept(Sampling(True, top_p=0.85)) == [0, 1, 2]
    assert kept(Sampling(True, top_p=0.01)) == [0]


def test_temperature_scales_before_the_filters() -> None:
    torch.testing.assert_close(Sampling(True, temperature=2.0).filtered(LOGITS), LOGITS / 2)


def test_greedy_is_the_argmax() -> None:
    assert Sampling().next_tokens(LOGITS, None).tolist() == [0]


def test_a_seeded_generator_draws_the_same_tokens() -> None:
    logits = torch.zeros(4, 50)
    draw = Sampling(True).next_tokens
    first = draw(logits, torch.Generator().manual_seed(3))
    assert torch.equal(first, draw(logits, torch.Generator().manual_seed(3)))


@pytest.mark.parametrize(
    ("options", "word"),
    [({"top_k": -1}, "top_k"), ({"top_p": 0.0}, "top_p"), ({"temperature": -1.0}, "temperature")],
)
def test_bad_settings_are_refused(options: dict, word: str) -> None:
    with pytest.raises(BadInputError, match=word):
        Sampling(True, **options)
