"""The decode loop's reads of device values back to the host, counted with the CPU standing in
for a GPU (:mod:`sonnx.testing.host_reads`).

The weights and the prompt with its mask count as device values (the prompt as if handed in on
the GPU). A decode of ``N`` tokens reads the chosen tokens once per step, and only when a
streamer or end tokens need them; besides those it reads at most :data:`ONCE_PER_CALL`
values: the mask handed in, the prompt run's value checks, the decode steps' value checks
(after the loop) and the result. Tokens are those of the same call uncounted, on the plain CPU.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import pytest
import torch

from sonnx.generation import load_decoder
from sonnx.testing.host_reads import count_host_reads, device_values
from tests.genai_builds import SENTENCES, build

#: The reads a call makes whatever the number of tokens (see the module docstring).
ONCE_PER_CALL = 4


class _Model(NamedTuple):
    rep: Any
    generate: Callable[..., np.ndarray]
    prompts: list[list[int]]  # two, of different lengths


def _left_padded(prompts: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    width = max(len(p) for p in prompts)
    ids = np.array([[0] * (width - len(p)) + p for p in prompts])
    mask = np.array([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    return ids, mask


@pytest.fixture(params=["genai", "optimum"])
def model(request, llama_rep) -> _Model:
    """A genai build (GroupQueryAttention, shared past buffer, right-padded) or an
    optimum-style export (Concat of past and new rows, left-padded)."""
    if request.param == "optimum":
        return _Model(llama_rep, llama_rep.generate, [[1, 5, 9, 33, 7], [1, 4]])
    decoder = load_decoder(build("llama", "fp32"))
    prompts = [decoder.tokenizer.encode(s) for s in SENTENCES[:2]]
    return _Model(decoder.rep, decoder.generate, prompts)


def _counted(
    model: _Model, prompts: list[list[int]], new: int, **options: Any
) -> tuple[np.ndarray, int]:
    """The tokens of a greedy call on ``prompts`` (left-padded) and its host reads; the tokens
    are checked against the same call uncounted."""
    ids, mask = _left_padded(prompts)
    options = {"max_new_tokens": new, "eos_token_id": None, **options}
    expected = model.generate(ids, attention_mask=mask, **options)
    ids_t, mask_t = torch.from_numpy(ids), torch.from_numpy(mask)
    with count_host_reads([*device_values(model.rep, {}), ids_t, mask_t]) as reads:
        out = model.generate(ids_t, attention_mask=mask_t, **options)
    np.testing.assert_array_equal(out, expected)
    return out, reads.count


@pytest.mark.parametrize("rows", [1, 2])
def test_no_step_reads_the_device_unless_the_host_needs_the_tokens(
    model: _Model, rows: int
) -> None:
    prompts = model.prompts[:rows]
    _, short = _counted(model, prompts, 3)
    _, long = _counted(model, prompts, 10)
    assert short == long <= ONCE_PER_CALL


@pytest.mark.parametrize("rows", [1, 2])
def test_a_streamed_decode_reads_each_steps_tokens_once(model: _Model, rows: int) -> None:
    prompts = model.prompts[:rows]
    seen: list[np.ndarray] = []
    out, short = _counted(model, prompts, 3, streamer=seen.append)
    _, long = _counted(model, prompts, 10, streamer=seen.append)
    assert long - short == 10 - 3
    assert long <= 10 + ONCE_PER_CALL
    np.testing.assert_array_equal(np.stack(seen[:3], 1), out[:, -3:])  # the first call's


def test_end_tokens_are_tested_on_the_tokens_read_once_per_step(model: _Model) -> None:
    """An end token the greedy tokens never reach: every step is run and read once."""
    prompts = model.prompts
    unended, _ = _counted(model, prompts, 10)
    end = next(t for t in range(3, 1000) if t not in unended)
    out, reads = _counted(model, prompts, 10, eos_token_id=end)
    np.testing.assert_array_equal(out, unended)
    assert reads <= 10 + ONCE_PER_CALL


def test_a_decode_that_ends_early_stops_reading(model: _Model) -> None:
    """Every row reaching an end token (its third) stops the loop and its reads."""
    prompts = model.prompts
    unended, _ = _counted(model, prompts, 10)
    width = len(unended[0]) - 10
    ends = [int(unended[0, width + 2]), int(unended[1, width + 2])]
    out, reads = _counted(model, prompts, 10, eos_token_id=ends)
    assert out.shape[1] <= width + 3
    assert reads <= out.shape[1] - width + ONCE_PER_CALL
