"""com.microsoft DecoderMaskedMultiHeadAttention against onnxruntime's CPU kernel."""

from __future__ import annotations

import numpy as np
import pytest

from sonnx.errors import BadInputError, UnsupportedOperatorError
from sonnx.operators.attention.contrib_decoder import DecoderMaskedMultiHeadAttention
from sonnx.tensor import Tensor
from tests.helpers import check_grad
from tests.operators.attention.contrib_helpers import close, contrib_model, randn, run_both

B, N, H, BUFFER = 2, 2, 8, 6
D = N * H
SHARED = {"past_present_share_buffer": 1}


def test_decode_steps_fill_the_shared_buffer_as_onnxruntime() -> None:
    """Three steps from a buffer holding two rows, each step's present fed back as past."""
    past = {"ort": [randn(B, N, BUFFER, H), randn(B, N, BUFFER, H)]}
    past["sonnx"] = list(past["ort"])
    bias = randn(3 * D)
    for length in (2, 3, 4):
        q, k, v = randn(B, 1, D), randn(B, 1, D), randn(B, 1, D)
        mask = np.ones((B, length + 1), np.int32)
        mask[1, 0] = 0
        attention_bias = randn(1, N, 1, length + 1)
        outs = {}
        for who in past:
            inputs = [q, k, v, mask, attention_bias, *past[who],
                      np.array([length], np.int32), None, None, bias]  # fmt: skip
            model = contrib_model("DecoderMaskedMultiHeadAttention", inputs, 3, num_heads=N,
                                  **SHARED)  # fmt: skip
            expected, got = run_both(model, inputs)
            outs[who] = expected if who == "ort" else got
            past[who] = list(outs[who][1:])
        for e, g in zip(outs["ort"], outs["sonnx"], strict=True):
            close(g, e)


@pytest.mark.parametrize("masked", [False, True])
def test_cross_attention_matches_onnxruntime(masked: bool) -> None:
    mask = np.array([[1, 1, 0, 1, 1], [1, 1, 1, 1, 0]], np.int32) if masked else None
    inputs = [randn(B, 1, D), randn(B, N, 5, H), randn(B, N, 5, H), mask]
    model = contrib_model("DecoderMaskedMultiHeadAttention", inputs, 1, num_heads=N, scale=0.3)
    (expected,), (got,) = run_both(model, inputs)
    close(got, expected)


def _step(q, k, v, past_k, past_v):
    length = Tensor(data=np.array([3], np.int32), requires_grad=False)
    op = DecoderMaskedMultiHeadAttention(num_heads=N, **SHARED)
    return op(q, k, v, None, None, past_k, past_v, length)[0]


def test_gradient_matches_finite_differences() -> None:
    arrays = [randn(1, 1, D), randn(1, 1, D), randn(1, 1, D), randn(1, N, 4, H),
              randn(1, N, 4, H)]  # fmt: skip
    check_grad(_step, [a.astype(np.float64) for a in arrays])


def test_refuses_beam_search_and_names_bad_buffers() -> None:
    op = DecoderMaskedMultiHeadAttention(num_heads=N, **SHARED)
    x, buffer = Tensor(data=randn(B, 1, D)), Tensor(data=randn(B, N, 4, H))
    with pytest.raises(UnsupportedOperatorError, match="beam search"):
        op(x, x, x, None, None, buffer, buffer, Tensor(data=np.array([1], np.int32)),
           Tensor(data=np.array([1], np.int32)))  # fmt: skip
    with pytest.raises(BadInputError, match="must leave a free row"):
        op(x, x, x, None, None, buffer, buffer, Tensor(data=np.array([4], np.int32)))
    unshared = DecoderMaskedMultiHeadAttention(num_heads=N)
    with pytest.raises(BadInputError, match="past_present_share_buffer=1"):
        unshared(x, x, x, None, None, buffer, buffer, Tensor(data=np.array([1], np.int32)))
