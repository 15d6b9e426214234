"""A decode step's attention over each sequence's filled cache rows (``sonnx::attend_filled_rows``),
as GroupQueryAttention runs it eagerly for a batch and in graph mode's traced decode steps."""

from __future__ import annotations

import math

import numpy as np
import onnxruntime as ort
import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from sonnx.engine.tracing import ValueFlow, tracing
from sonnx.errors import BadInputError
from sonnx.operators.attention.contrib_gqa import GroupQueryAttention
from sonnx.operators.attention.filled_rows import attends_filled_rows
from tests.operators.attention.contrib_helpers import close, contrib_model, randn


def _reference(q, k, v, lengths, scale, window) -> torch.Tensor:
    """Each sequence's softmax over its rows, written out, the KV heads repeated."""
    out = torch.empty_like(q)
    group = q.shape[1] // k.shape[1]
    for b, length in enumerate(lengths):
        first = max(0, length - window) if window > 0 else 0
        keys = k[b, :, first:length].repeat_interleave(group, 0)
        values = v[b, :, first:length].repeat_interleave(group, 0)
        weights = torch.softmax(q[b] @ keys.transpose(1, 2) * scale, -1)
        out[b] = weights @ values
    return out


def _unfilled_as_nan(cache: np.ndarray, lengths: list[int]) -> np.ndarray:
    """``cache`` (batch, kv heads, rows, size) with each sequence's rows past its length NaN."""
    cache = cache.copy()
    for b, length in enumerate(lengths):
        cache[b, :, length:] = math.nan
    return cache


@pytest.mark.parametrize("window", [0, 3], ids=["all_rows", "local_window"])
def test_each_sequence_attends_its_filled_rows_only(window) -> None:
    lengths = [5, 12, 1]
    q = torch.from_numpy(randn(3, 4, 1, 8))
    k, v = (torch.from_numpy(_unfilled_as_nan(randn(3, 2, 12, 8), lengths)) for _ in range(2))
    got = torch.ops.sonnx.attend_filled_rows(q, k, v, torch.tensor(lengths), 0.3, window)
    assert got.is_contiguous()
    torch.testing.assert_close(got, _reference(q, k, v, lengths, 0.3, window))
    one = torch.ops.sonnx.attend_filled_rows(q[:1], k[:1], v[:1], torch.tensor([5]), 0.3, window)
    torch.testing.assert_close(one, got[:1])


@pytest.mark.parametrize("length", [0, 13])
def test_a_length_outside_the_cache_is_named(length) -> None:
    q, k = torch.zeros(2, 2, 1, 4), torch.zeros(2, 2, 12, 4)
    with pytest.raises(BadInputError, match=f"seqlens_k {length - 1} of sequence 1 puts"):
        torch.ops.sonnx.attend_filled_rows(q, k, k, torch.tensor([3, length]), 1.0, 0)


def test_it_steps_aside_for_a_gradient_and_for_a_prompt() -> None:
    k = torch.zeros(1, 2, 6, 4)
    assert attends_filled_rows(torch.zeros(1, 2, 1, 4), k, k)
    assert not attends_filled_rows(torch.zeros(1, 2, 1, 4, requires_grad=True), k, k)
    assert not attends_filled_rows(torch.zeros(1, 2, 3, 4), k, k)


@pytest.mark.parametrize("attrs", [{}, {"local_window_size": 3}], ids=["plain", "local_window"])
def test_a_traced_decode_step_reads_only_the_filled_rows(attrs) -> None:
    """Graph mode's decode step over a 12-row buffer where the sequences hold 6 and 4 rows
    (total_sequence_length the buffer's width, as genai feeds it): the trace calls the extern
    attention, which never reads the NaN rows past each sequence, and equals onnxruntime."""
    seqlens = np.array([5, 3], np.int32)  # the new tokens' rows
    query, key, value = randn(2, 1, 32), randn(2, 1, 16), randn(2, 1, 16)
    past = [_unfilled_as_nan(randn(2, 2, 12, 8), [5, 3]) for _ in range(2)]
    total = np.array(12, np.int32)
    op = GroupQueryAttention(num_heads=4, kv_num_heads=2, **attrs)

    def step(*xs: torch.Tensor) -> torch.Tensor:
        with tracing(), ValueFlow(list(xs)):
            return op.forward(*xs, torch.from_numpy(total))[0]

    arrays = [query, key, value, *past, seqlens]
    graph = make_fx(step)(*(torch.from_numpy(a) for a in arrays))
    assert "sonnx.attend_filled_rows" in graph.code
    got = graph(*(torch.from_numpy(a.copy()) for a in arrays))
    inputs = [*arrays, total]
    model = contrib_model("GroupQueryAttention", inputs, 3, num_heads=4, kv_num_heads=2, **attrs)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feed = {i.name: a for i, a in zip(model.graph.input, inputs, strict=True)}
    expected = session.run(None, feed)[0]
    assert np.isfinite(expected).all()
    close(got.numpy(), expected)
