"""com.microsoft RotaryEmbedding and GroupQueryAttention against onnxruntime's CPU kernels."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import numpy as np
import onnxruntime as ort
import pytest
import torch
from onnx import helper
from torch.fx.experimental.proxy_tensor import make_fx

from sonnx.engine.tracing import ValueFlow, tracing
from sonnx.errors import BadInputError, UnsupportedOperatorError
from sonnx.onnx.exporter import to_onnx
from sonnx.operators.attention.contrib_gqa import GroupQueryAttention, RotaryEmbedding
from sonnx.run_state import CACHES_IN_PLACE
from sonnx.tensor import Tensor, to_numpy
from tests.helpers import check_grad
from tests.operators.attention.contrib_helpers import RNG, close, contrib_model, randn, run_both


def caches(positions: int, half: int) -> tuple[np.ndarray, np.ndarray]:
    angles = RNG.uniform(0, 6, (positions, half)).astype(np.float32)
    return np.cos(angles), np.sin(angles)


POSITIONS = np.array([[0, 1, 2], [5, 6, 7]], np.int64)


@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize(
    "shape, positions, half, attrs",
    [
        ((2, 3, 16), POSITIONS, 4, {"num_heads": 2}),
        ((2, 3, 16), np.array([3], np.int64), 4, {}),
        ((2, 2, 3, 8), POSITIONS, 4, {}),
        ((2, 3, 16), POSITIONS, 2, {"num_heads": 2, "rotary_embedding_dim": 4}),
        ((2, 3, 16), POSITIONS, 4, {"num_heads": 2, "scale": 3.0, "is_packed_batching": 1}),
    ],
    ids=["3d_num_heads", "3d_start_position", "4d", "partial_rotary", "ignored_attributes"],
)
def test_rotary_embedding_matches_onnxruntime(interleaved, shape, positions, half, attrs) -> None:
    cos, sin = caches(16, half)
    inputs = [randn(*shape), positions, cos, sin]
    model = contrib_model("RotaryEmbedding", inputs, 1, interleaved=interleaved, **attrs)
    (expected,), (got,) = run_both(model, inputs)
    close(got, expected)


def test_rotary_embedding_exports_as_it_came_and_has_a_gradient() -> None:
    cos, sin = caches(16, 4)
    arrays = [randn(2, 3, 16), POSITIONS, cos, sin]
    inputs = [Tensor(data=a, requires_grad=False) for a in arrays]
    out = RotaryEmbedding(num_heads=2, interleaved=1)(*inputs)
    model = to_onnx(inputs, [out])
    (node,) = model.graph.node
    assert (node.op_type, node.domain, len(node.attribute)) == (
        "RotaryEmbedding",
        "com.microsoft",
        2,
    )
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feed = {i.name: a for i, a in zip(model.graph.input, arrays, strict=True)}
    close(to_numpy(out), session.run(None, feed)[0])
    rotate_x = RotaryEmbedding(num_heads=2, interleaved=1)
    check_grad(lambda x, p, c, s: rotate_x(x, p, c, s),
               [arrays[0].astype(np.float64), POSITIONS, cos.astype(np.float64),
                sin.astype(np.float64)], wrt=[0])  # fmt: skip


def test_rotary_embedding_names_a_bad_cache() -> None:
    cos, sin = caches(16, 3)
    op = RotaryEmbedding(num_heads=2)
    with pytest.raises(BadInputError, match="cos_cache and sin_cache"):
        op(Tensor(data=randn(2, 3, 16)), Tensor(data=POSITIONS), Tensor(data=cos), Tensor(data=sin))


def _gqa_steps(lengths: list[int], packed: bool, heads: int, kv_heads: int, size: int,
               rotary_half: int, attrs: dict, buffer: int = 0,
               extra: Callable[[int, np.ndarray], list] | None = None,
               full_width: bool = False, prompt_buffer: bool = False) -> None:  # fmt: skip
    """A prompt of ``lengths`` (right-padded), then three decode steps, each step's present
    fed back as the next past (grown to ``buffer`` rows, as a preallocated cache is); only
    rows onnxruntime defines (within each sequence) compared. ``extra(seq, seqlens_k)``
    gives the inputs after sin_cache (position_ids, attention_bias, head_sink).
    ``full_width`` gives the decode steps total_sequence_length = ``buffer``, as a mask of the
    buffer's full width with 0s after each sequence's tokens does (static decode shapes).
    ``prompt_buffer`` gives the prompt a zero past of ``buffer`` rows (genai's preallocated
    buffer) instead of none."""
    batch, prompt = len(lengths), max(lengths)
    cos, sin = caches(32, rotary_half) if rotary_half else (None, None)
    first = [np.zeros((batch, kv_heads, buffer, size), np.float32)] * 2 if prompt_buffer else []
    past: dict[str, list] = {who: first or [None, None] for who in ("ort", "sonnx")}
    steps = [(prompt, np.array(lengths) - 1)]
    steps += [(1, np.array(lengths) - 1 + i) for i in (1, 2, 3)]
    for seq, seqlens_k in steps:
        total = np.array(buffer if full_width and seq == 1 else seqlens_k.max() + 1, np.int32)
        q, k = randn(batch, seq, heads * size), randn(batch, seq, kv_heads * size)
        v = randn(batch, seq, kv_heads * size)
        after = extra(seq, seqlens_k) if extra else []
        outs = {}
        for who in past:
            inputs = [np.concatenate([q, k, v], 2), None, None] if packed else [q, k, v]
            inputs += [*past[who], seqlens_k.astype(np.int32), total]
            inputs += [cos, sin, *after]
            model = contrib_model("GroupQueryAttention", inputs, 3, num_heads=heads,
                                  kv_num_heads=kv_heads, do_rotary=int(bool(rotary_half)),
                                  **attrs)  # fmt: skip
            expected, got = run_both(model, inputs)
            outs[who] = expected if who == "ort" else got
            grow = ((0, 0), (0, 0), (0, max(0, buffer - outs[who][1].shape[2])), (0, 0))
            past[who] = [np.pad(cache, grow) for cache in outs[who][1:]]
        assert outs["sonnx"][1].shape == outs["ort"][1].shape
        for b in range(batch):
            valid = int(seqlens_k[b]) + 1
            close(outs["sonnx"][0][b, : min(seq, valid)], outs["ort"][0][b, : min(seq, valid)])
            for i in (1, 2):
                close(outs["sonnx"][i][b, :, :valid], outs["ort"][i][b, :, :valid])


@pytest.mark.parametrize(
    "packed, heads, kv_heads, size, rotary_half, attrs",
    [
        (False, 4, 2, 8, 0, {}),
        (False, 4, 4, 8, 0, {"scale": 0.3}),
        (False, 4, 2, 16, 8, {}),
        (False, 4, 1, 32, 8, {"rotary_interleaved": 1}),
        (True, 4, 2, 16, 8, {}),
        (False, 4, 2, 16, 0, {"local_window_size": 2}),
        (False, 4, 2, 16, 0, {"softcap": 0.5}),
        (True, 4, 2, 16, 8, {"local_window_size": 3, "softcap": 0.7, "scale": 0.2}),
    ],
    ids=["gqa", "mha_scale", "rotary", "rotary_interleaved_partial", "packed_rotary",
         "local_window", "softcap", "packed_everything"],
)  # fmt: skip
def test_group_query_attention_prompt_then_decode(
    packed, heads, kv_heads, size, rotary_half, attrs
) -> None:
    _gqa_steps([6, 3], packed, heads, kv_heads, size, rotary_half, attrs)


def _decode_arrays() -> list[np.ndarray]:
    """One decode step's query, key, value and past (4 heads over 2 KV heads of size 8)."""
    return [randn(2, 1, 32), randn(2, 1, 16), randn(2, 1, 16), randn(2, 2, 3, 8),
            randn(2, 2, 3, 8)]  # fmt: skip


def _gqa_decode(q, k, v, past_k, past_v):
    op = GroupQueryAttention(num_heads=4, kv_num_heads=2, softcap=0.8)
    seqlens = Tensor(data=np.array([3, 2], np.int32), requires_grad=False)
    total = Tensor(data=np.array(4, np.int32), requires_grad=False)
    return op(q, k, v, past_k, past_v, seqlens, total)[0]


def _positions(seq: int, seqlens_k: np.ndarray) -> list:
    """position_ids 10 past where the kernel would count from, one per token; the prompt's
    rows differ (the kernel reads only the first element of a first prompt's)."""
    batch = len(seqlens_k)
    start = seqlens_k.reshape(-1, 1) + 1 - seq if seq == 1 else 3 * np.arange(batch)[:, None]
    return [(start + 10 + np.arange(seq)).astype(np.int64)]


@pytest.mark.parametrize(
    "rotary_half, attrs, extra",
    [
        (8, {}, _positions),
        (0, {}, lambda seq, k: [None, randn(2, 1, seq, int(k.max()) + 1)]),
        (0, {"softcap": 0.5}, lambda seq, k: [None, randn(1, 4, seq, int(k.max()) + 1)]),
        (0, {}, lambda seq, k: [None, None, randn(4)]),
        (0, {"smooth_softmax": 1}, lambda seq, k: []),
    ],
    ids=["position_ids", "attention_bias", "attention_bias_softcap", "head_sink",
         "smooth_softmax"],
)  # fmt: skip
def test_group_query_attention_optional_inputs(rotary_half, attrs, extra) -> None:
    _gqa_steps([5, 3], False, 4, 2, 16, rotary_half, attrs, extra=extra)


def test_group_query_attention_over_a_preallocated_cache() -> None:
    def bias(seq: int, seqlens_k: np.ndarray) -> list:
        return [None, randn(2, 4, seq, int(seqlens_k.max()) + 1)]

    _gqa_steps([5, 3], False, 4, 2, 16, 8, {"local_window_size": 3}, buffer=12, extra=bias)


@pytest.mark.parametrize("attrs", [{}, {"local_window_size": 3}], ids=["plain", "local_window"])
def test_group_query_attention_decodes_at_the_buffers_full_width(attrs) -> None:
    """total_sequence_length the buffer's 12 rows while the sequences hold 6 and 4 .. 9 and 7:
    each attends to its own rows only, as onnxruntime's kernel (genai's CUDA-graph mode feeds
    this; sonnx's static decode steps too)."""
    _gqa_steps([6, 4], True, 4, 2, 16, 8, attrs, buffer=12, full_width=True)


@pytest.mark.parametrize(
    "attrs, extra",
    [
        ({}, None),
        ({"local_window_size": 3}, None),
        ({}, lambda seq, k: [None, randn(2, 4, seq, int(k.max()) + 1)]),
    ],
    ids=["plain", "local_window", "attention_bias"],
)
def test_group_query_attention_first_prompt_into_a_longer_buffer(attrs, extra) -> None:
    """A prompt into a zero past of 12 rows, as genai's preallocated buffer: it attends to the
    prompt's rows only (the fused causal kernel when plain, a mask otherwise), then three
    decode steps, each equal to onnxruntime's kernel."""
    _gqa_steps([6, 4], True, 4, 2, 16, 8, attrs, buffer=12, extra=extra, prompt_buffer=True)


@pytest.mark.parametrize("seq, seqlens", [(3, [2, 1]), (1, [3, 2])], ids=["prompt", "decode"])
def test_group_query_attention_writes_a_shared_buffer_in_place_when_allowed(seq, seqlens) -> None:
    """A past of the buffer's full length (6 rows for a total of 4) is written in place, and
    is the present, only under CACHES_IN_PLACE; the outputs are those of a copied present
    and, without the switch, the past is left as it was."""
    op = GroupQueryAttention(num_heads=4, kv_num_heads=2, local_window_size=2)
    q, k, v = (torch.from_numpy(randn(2, seq, n)) for n in (32, 16, 16))
    lengths = torch.tensor(seqlens, dtype=torch.int32)
    total = torch.tensor(max(seqlens) + 1, dtype=torch.int32)
    past = [torch.from_numpy(randn(2, 2, 6, 8)) for _ in range(2)]
    kept = [p.clone() for p in past]
    copied = op.forward(q, k, v, *past, lengths, total)
    assert all(torch.equal(p, c) for p, c in zip(past, kept, strict=True))
    assert all(c.data_ptr() != p.data_ptr() for c, p in zip(copied[1:], past, strict=True))
    token = CACHES_IN_PLACE.set(True)
    try:
        in_place = op.forward(q, k, v, *past, lengths, total)
    finally:
        CACHES_IN_PLACE.reset(token)
    assert all(c is p for c, p in zip(in_place[1:], past, strict=True))
    for got, expected in zip(in_place, copied, strict=True):
        torch.testing.assert_close(got, expected, rtol=0, atol=0)


def _one_token_steps(attrs: dict, packed: bool, positions: bool, traced: bool = False):
    """Three decode steps of one sequence into a 9-row shared buffer (6 rows valid first),
    in place (the fast path, or under ``traced`` the general one) and copied."""
    op = GroupQueryAttention(num_heads=4, kv_num_heads=2, **attrs)
    rotary = attrs.get("do_rotary", 0)
    cos, sin = (torch.from_numpy(c) for c in caches(32, 6 if "interleaved" in str(attrs) else 8))
    past = [torch.from_numpy(randn(1, 2, 9, 16)) for _ in range(2)]
    buffer = [p.clone() for p in past]
    for row in (5, 6, 7):
        q, k, v = (torch.from_numpy(randn(1, 1, n)) for n in (64, 32, 32))
        inputs = [torch.cat([q, k, v], 2), None, None] if packed else [q, k, v]
        lengths = torch.tensor([row], dtype=torch.int32)
        extra = [cos, sin] if rotary else [None, None]
        if positions:
            extra.append(torch.tensor([[row + 3]], dtype=torch.int64))
        total = torch.tensor(row + 1, dtype=torch.int32)
        copied = op.forward(*inputs, *past, lengths, total, *extra)
        token = CACHES_IN_PLACE.set(True)
        try:
            with tracing() if traced else contextlib.nullcontext():
                in_place = op.forward(*inputs, *buffer, lengths, total, *extra)
        finally:
            CACHES_IN_PLACE.reset(token)
        assert in_place[1] is buffer[0] and in_place[2] is buffer[1]
        torch.testing.assert_close(in_place[0], copied[0], rtol=1e-6, atol=1e-6)
        for got, expected in zip(in_place[1:], copied[1:], strict=True):
            torch.testing.assert_close(got[:, :, : row + 1], expected[:, :, : row + 1])
        past = [c[:, :, :9] for c in copied[1:]]


@pytest.mark.parametrize(
    "attrs, packed, positions",
    [
        ({}, False, False),
        ({"do_rotary": 1}, True, False),
        ({"do_rotary": 1, "rotary_interleaved": 1}, False, True),
        ({"do_rotary": 1, "local_window_size": 3, "scale": 0.3}, True, False),
    ],
    ids=["plain", "packed_rotary", "interleaved_partial_positions", "window_scale"],
)
def test_group_query_attention_one_token_in_place_equals_the_general_path(
    attrs, packed, positions
) -> None:
    """A generation step (one token of one sequence into a shared buffer) reads its cache row
    on the host and slices; it equals the general path, which is checked against onnxruntime
    above, and writes the buffer it was given. Under a tracer it takes the general path."""
    _one_token_steps(attrs, packed, positions)
    _one_token_steps(attrs, packed, positions, traced=True)


def test_group_query_attention_one_token_past_the_buffer_is_named() -> None:
    op = GroupQueryAttention(num_heads=2, kv_num_heads=2)
    q = torch.zeros(1, 1, 16)
    past = [torch.zeros(1, 2, 4, 8) for _ in range(2)]
    token = CACHES_IN_PLACE.set(True)
    try:
        with pytest.raises(BadInputError, match="seqlens_k 4 puts the new token past"):
            op.forward(q, q, q, *past, torch.tensor([4], dtype=torch.int32),
                       torch.tensor(4, dtype=torch.int32))  # fmt: skip
    finally:
        CACHES_IN_PLACE.reset(token)


def test_group_query_attention_gradient_matches_finite_differences() -> None:
    arrays = _decode_arrays()
    check_grad(_gqa_decode, [a.astype(np.float64) for a in arrays])


def test_group_query_attention_traces_into_one_graph() -> None:
    """A decode step with fewer KV heads than query heads traces as graph mode traces (no
    value-dependent shape: graph mode would run the node eagerly) and the graph equals eager.
    total_sequence_length is fixed, as the builder's graphs compute it from shapes."""
    op = GroupQueryAttention(num_heads=4, kv_num_heads=2)
    arrays = [torch.from_numpy(a) for a in _decode_arrays()]
    seqlens, total = torch.tensor([3, 2], dtype=torch.int32), torch.tensor(4, dtype=torch.int32)

    def step(*xs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        with tracing(), ValueFlow(list(xs)):
            return op.forward(*xs[:5], xs[5], total)

    graph = make_fx(step)(*arrays, seqlens)
    for got, expected in zip(graph(*arrays, seqlens), op.forward(*arrays, seqlens, total),
                             strict=True):  # fmt: skip
        torch.testing.assert_close(got, expected)


def test_group_query_attention_exports_as_it_came() -> None:
    arrays = _decode_arrays()
    inputs = [Tensor(data=a, requires_grad=False) for a in arrays]
    out = _gqa_decode(*inputs)
    model = to_onnx(inputs, [out])
    (node,) = model.graph.node
    assert (node.op_type, node.domain) == ("GroupQueryAttention", "com.microsoft")
    assert {a.name: helper.get_attribute_value(a) for a in node.attribute} == pytest.approx(
        {"num_heads": 4, "kv_num_heads": 2, "softcap": 0.8}
    )
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feed = {i.name: a for i, a in zip(model.graph.input, arrays, strict=True)}
    close(to_numpy(out), session.run(None, feed)[0])


def test_group_query_attention_refuses_what_it_does_not_run() -> None:
    op = GroupQueryAttention(num_heads=2, kv_num_heads=2, k_quant_type="PER_TENSOR")
    q = torch.zeros(1, 1, 8)
    with pytest.raises(UnsupportedOperatorError, match="quantized KV cache"):
        op.forward(q, q, q, None, None, torch.zeros(1, dtype=torch.int32),
                   torch.tensor(1, dtype=torch.int32))  # fmt: skip


def test_group_query_attention_names_a_bad_head_split() -> None:
    op = GroupQueryAttention(num_heads=3, kv_num_heads=2)
    q = torch.zeros(1, 1, 12)
    with pytest.raises(BadInputError, match="kv_num_heads dividing num_heads"):
        op.forward(q, q, q, None, None, torch.zeros(1, dtype=torch.int32),
                   torch.tensor(1, dtype=torch.int32))  # fmt: skip


def test_group_query_attention_names_absent_required_inputs() -> None:
    op = GroupQueryAttention(num_heads=2, kv_num_heads=2)
    q = torch.zeros(1, 1, 16)
    with pytest.raises(BadInputError, match=r"\['seqlens_k', 'total_sequence_length'\] absent"):
        op.forward(q, q, q)
