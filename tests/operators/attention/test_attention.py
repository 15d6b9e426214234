"""Attention, RotaryEmbedding, LinearAttention, CausalConvWithState and FlexAttention."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as F
from onnx import helper
from onnx.reference import ReferenceEvaluator

import sonnx
import sonnx.autograd as autograd
from sonnx.autograd import Attention, CausalConvWithState, LinearAttention, RotaryEmbedding
from sonnx.errors import BadInputError, ExportError
from sonnx.onnx.exporter import to_onnx
from sonnx.proto.graph_builder import GraphBuilder
from sonnx.tensor import Tensor
from tests.helpers import check_grad

RNG = np.random.default_rng(0)


def reference(op_type: str, inputs: list, opset: int, n_out: int = 1, **attrs) -> list:
    """All outputs of one ONNX node run with onnx.reference (``None`` inputs are absent)."""
    names = [f"in{i}" if x is not None else "" for i, x in enumerate(inputs)]
    outs = [f"out{i}" for i in range(n_out)]
    node = helper.make_node(op_type, names, outs, **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, onnx.TensorProto.UNDEFINED, None) for n in names if n],
        [helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None) for o in outs],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return ReferenceEvaluator(model).run(
        None, {n: x for n, x in zip(names, inputs, strict=True) if n}
    )


def const(x) -> Tensor:
    return Tensor(data=np.asarray(x), requires_grad=False)


def randn(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


ATTENTION_CASES = [
    ("plain", 23, lambda: [randn(2, 3, 4, 8), randn(2, 3, 6, 8), randn(2, 3, 6, 5)], {}),
    (
        "gqa_3d_causal",
        23,
        lambda: [randn(2, 4, 24), randn(2, 4, 8), randn(2, 4, 8)],
        dict(q_num_heads=6, kv_num_heads=2, is_causal=1),
    ),
    (
        "bool_mask_past_softcap",
        23,
        lambda: [
            randn(1, 2, 3, 4),
            randn(1, 2, 3, 4),
            randn(1, 2, 3, 4),
            RNG.random((3, 5)) > 0.3,
            randn(1, 2, 2, 4),
            randn(1, 2, 2, 4),
        ],
        dict(softcap=2.0, qk_matmul_output_mode=2, is_causal=1),
    ),
    (
        "float_mask_scale_mode3",
        23,
        lambda: [randn(2, 2, 3, 4), randn(2, 2, 5, 4), randn(2, 2, 5, 4), randn(2, 1, 3, 5)],
        dict(scale=0.3, qk_matmul_output_mode=3),
    ),
    (
        "nonpad_kv_causal",
        24,
        lambda: [
            randn(2, 2, 2, 4),
            randn(2, 2, 6, 4),
            randn(2, 2, 6, 4),
            None,
            None,
            None,
            np.array([4, 6], np.int64),
        ],
        dict(is_causal=1),
    ),
    (
        "window",
        25,
        lambda: [randn(1, 2, 5, 4), randn(1, 2, 5, 4), randn(1, 2, 5, 4)],
        dict(left_window_size=2, right_window_size=1),
    ),
]


@pytest.mark.parametrize(
    ("opset", "inputs", "attrs"),
    [c[1:] for c in ATTENTION_CASES],
    ids=[c[0] for c in ATTENTION_CASES],
)
def test_attention_matches_reference(opset, inputs, attrs):
    arrays = inputs()
    expected = reference("Attention", arrays, opset, n_out=4, **attrs)
    got = Attention(version=opset, **attrs)(*[None if a is None else const(a) for a in arrays])
    for k, (g, e) in enumerate(zip(got, expected, strict=True)):
        np.testing.assert_allclose(g.numpy(), e, rtol=1e-5, atol=1e-5, err_msg=f"output {k}")


def test_attention_fully_masked_row_is_zero_with_finite_gradients():
    mask = np.ones((3, 4), bool)
    mask[1] = False
    q, k, v = randn(1, 1, 3, 2), randn(1, 1, 4, 2), randn(1, 1, 4, 2)
    y = Attention()(const(q), const(k), const(v), const(mask))[0].numpy()
    np.testing.assert_array_equal(y[0, 0, 1], 0)
    check_grad(
        lambda a, b, c: Attention()(a, b, c, const(mask))[0],
        [q.astype(np.float64), k.astype(np.float64), v.astype(np.float64)],
    )


def test_attention_function_matches_torch_sdpa():
    q, k, v = randn(2, 4, 5, 8), randn(2, 4, 7, 8), randn(2, 4, 7, 3)
    mask = RNG.random((5, 7)) > 0.2
    mask[:, 0] = True
    got = autograd.attention(const(q), const(k), const(v), const(mask)).numpy()
    expected = F.scaled_dot_product_attention(
        torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v), torch.from_numpy(mask)
    )
    np.testing.assert_allclose(got, expected.numpy(), rtol=1e-5, atol=1e-5)
    causal = autograd.attention(const(q), const(q), const(q), is_causal=True).numpy()
    t = torch.from_numpy(q)
    expected = F.scaled_dot_product_attention(t, t, t, is_causal=True)
    np.testing.assert_allclose(causal, expected.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_attention_gradients_wrt_q_k_v(causal):
    q, k = RNG.standard_normal((1, 4, 3, 2)), RNG.standard_normal((1, 2, 3, 2))
    v = RNG.standard_normal((1, 2, 3, 3))
    check_grad(lambda a, b, c: autograd.attention(a, b, c, is_causal=causal), [q, k, v])


def test_attention_3d_function_and_bfloat16():
    q, k, v = randn(1, 3, 8), randn(1, 5, 4), randn(1, 5, 4)
    got = autograd.attention(const(q), const(k), const(v), num_heads=4, kv_num_heads=2)
    expected = reference("Attention", [q, k, v], 23, q_num_heads=4, kv_num_heads=2)[0]
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-5, atol=1e-5)
    half = [Tensor(data=torch.from_numpy(a).bfloat16(), requires_grad=False) for a in (q, k, v)]
    low = Attention(q_num_heads=4, kv_num_heads=2)(*half)[0]
    assert low.dtype == torch.bfloat16
    np.testing.assert_allclose(low.numpy(), expected, rtol=0.05, atol=0.05)


def test_attention_bad_inputs_and_export():
    q = const(randn(1, 2, 3, 4))
    with pytest.raises(BadInputError, match="all be 3-D"):
        Attention()(q, const(randn(2, 3, 4)), const(randn(2, 3, 4)))
    with pytest.raises(BadInputError, match="multiple of Hkv"):
        Attention()(q, const(randn(1, 3, 3, 4)), const(randn(1, 3, 3, 4)))
    with pytest.raises(BadInputError, match="q_num_heads"):
        Attention()(const(randn(1, 3, 4)), const(randn(1, 3, 4)), const(randn(1, 3, 4)))
    with pytest.raises(BadInputError, match="together"):
        Attention()(q, q, q, None, q)
    with pytest.raises(ExportError, match="needs opset 25"):
        Attention(left_window_size=2).export(GraphBuilder(24), ["q", "k", "v"], ["y"])
    g = GraphBuilder(23)
    Attention(is_causal=1).export(g, ["q", "k", "v"], ["y"])
    assert g.nodes[0].op_type == "Attention"


@pytest.mark.parametrize("opset", [13, 22, 23])
def test_attention_export_runs_in_onnxruntime(opset):
    """Opset 23+ writes Attention; older opsets a MatMul/Softmax decomposition."""
    q3, k3 = Tensor(data=randn(2, 3, 16), name="q"), Tensor(data=randn(2, 5, 8), name="k")
    past_k, past_v = (
        Tensor(data=randn(2, 2, 2, 4), name="pk"),
        Tensor(data=randn(2, 2, 2, 4), name="pv"),
    )
    y3, present_k, _, _ = Attention(q_num_heads=4, kv_num_heads=2, is_causal=1, softcap=3.0)(
        q3, k3, k3, None, past_k, past_v
    )
    q, k, v = (
        Tensor(data=randn(1, 4, 3, 8), name="q4"),
        Tensor(data=randn(1, 2, 5, 8), name="k4"),
        Tensor(data=randn(1, 2, 5, 6), name="v4"),
    )
    mask = Tensor(data=RNG.random((3, 5)) > 0.3, name="mask")
    mask.data[:, 0] = True
    y4 = autograd.attention(q, k, v, mask, scale=0.2)
    inputs = [q3, k3, past_k, past_v, q, k, v, mask]
    outputs = [y3, present_k, y4]
    model = to_onnx(inputs, outputs, opset=opset)
    assert any(n.op_type == "Attention" for n in model.graph.node) == (opset >= 23)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    results = session.run(None, {t.name: t.numpy() for t in inputs})
    for got, out in zip(results, outputs, strict=True):
        np.testing.assert_allclose(got, out.numpy(), rtol=1e-5, atol=1e-5)


ROTARY_CASES = [
    ((2, 3, 4, 8), {}, True),
    ((2, 4, 12), dict(num_heads=3, interleaved=1), True),
    ((1, 2, 3, 8), dict(rotary_embedding_dim=4), False),
    ((1, 3, 8), dict(num_heads=2, interleaved=1, rotary_embedding_dim=2), True),
]


@pytest.mark.parametrize(("shape", "attrs", "with_ids"), ROTARY_CASES)
def test_rotary_embedding_matches_reference_and_differentiates(shape, attrs, with_ids):
    x = randn(*shape)
    seq = shape[2] if len(shape) == 4 else shape[1]
    head = shape[3] if len(shape) == 4 else shape[2] // attrs["num_heads"]
    half = attrs.get("rotary_embedding_dim", head) // 2
    if with_ids:
        cos, sin = randn(10, half), randn(10, half)
        ids = RNG.integers(0, 10, (shape[0], seq)).astype(np.int64)
        inputs = [x, cos, sin, ids]
    else:
        cos, sin = randn(shape[0], seq, half), randn(shape[0], seq, half)
        inputs = [x, cos, sin]
    expected = reference("RotaryEmbedding", inputs, 23, **attrs)[0]
    got = RotaryEmbedding(**attrs)(*[const(a) for a in inputs]).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    rest = [const(a) for a in inputs[1:]]
    check_grad(lambda t: RotaryEmbedding(**attrs)(t, *rest), [x.astype(np.float64)])


def test_rotary_embedding_function_and_errors():
    x = randn(1, 2, 3, 4)
    cos, sin = randn(5, 2), randn(5, 2)
    ids = np.array([[0, 1, 2]], np.int64)
    out = autograd.rotary_embedding(const(x), const(cos), const(sin), const(ids))
    assert out.creator.op_type == "RotaryEmbedding" and out.shape == x.shape
    with pytest.raises(BadInputError, match="num_heads"):
        RotaryEmbedding()(const(randn(1, 3, 4)), const(cos), const(sin), const(ids))
    with pytest.raises(BadInputError, match="rotary dim / 2"):
        RotaryEmbedding()(const(x), const(randn(5, 3)), const(randn(5, 3)), const(ids))


LINEAR_RULES = [
    ("linear", False, False),
    ("gated", True, False),
    ("delta", False, True),
    ("gated_delta", True, True),
]


@pytest.mark.parametrize(("rule", "gated", "delta"), LINEAR_RULES)
def test_linear_attention_matches_reference(rule, gated, delta):
    b, t, hq, hkv, dk, dv = 2, 4, 4, 2, 3, 2
    q, k, v = randn(b, t, hq * dk), randn(b, t, hkv * dk), randn(b, t, hkv * dv)
    past = randn(b, hkv, dk, dv)
    decay = -np.abs(randn(b, t, hkv)) if gated else None
    beta = RNG.random((b, t, hkv)).astype(np.float32) if delta else None
    inputs = [q, k, v, past, decay, beta]
    attrs = dict(q_num_heads=hq, kv_num_heads=hkv, update_rule=rule)
    expected = reference("LinearAttention", inputs, 27, n_out=2, **attrs)
    got = LinearAttention(**attrs)(*[None if a is None else const(a) for a in inputs])
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g.numpy(), e, rtol=1e-5, atol=1e-5)


def test_linear_attention_gradients_and_errors():
    q, k, v = (RNG.standard_normal((1, 3, 4)) for _ in range(3))
    beta = const(np.full((1, 3, 2), 0.5))
    check_grad(
        lambda a, b, c: autograd.linear_attention(a, b, c, 2, 2, "delta", beta=beta)[0], [q, k, v]
    )
    with pytest.raises(BadInputError, match="needs decay given"):
        autograd.linear_attention(const(q), const(k), const(v), 2, 2, "gated")
    with pytest.raises(BadInputError, match="multiple of kv_num_heads"):
        autograd.linear_attention(const(q), const(k), const(v), 3, 2)


@pytest.mark.parametrize("activation", ["none", "silu"])
@pytest.mark.parametrize("with_state", [False, True])
def test_causal_conv_with_state_matches_reference_and_differentiates(activation, with_state):
    x, w, bias = randn(2, 3, 5), randn(3, 1, 3), randn(3)
    state = randn(2, 3, 2) if with_state else None
    inputs = [x, w, bias, state]
    expected = reference("CausalConvWithState", inputs, 27, n_out=2, activation=activation)
    got = CausalConvWithState(activation=activation)(
        *[None if a is None else const(a) for a in inputs]
    )
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g.numpy(), e, rtol=1e-5, atol=1e-5)
    check_grad(
        lambda a, b: autograd.causal_conv_with_state(a, b, activation=activation)[0],
        [x.astype(np.float64), w.astype(np.float64)],
    )


def test_causal_conv_with_state_errors():
    with pytest.raises(BadInputError, match="weight"):
        CausalConvWithState()(const(randn(1, 2, 4)), const(randn(3, 1, 2)))
    with pytest.raises(BadInputError, match="past_state"):
        CausalConvWithState()(const(randn(1, 2, 4)), const(randn(2, 1, 3)), None, const(randn(1)))


def test_flex_attention_import_with_score_mod_matches_reference():
    """FlexAttention imports as standard recorded ops around its score_mod subgraph."""
    score_mod = helper.make_graph(
        [helper.make_node("Mul", ["scores", "two"], ["scores_out"])],
        "score_mod",
        [helper.make_tensor_value_info("scores", onnx.TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("scores_out", onnx.TensorProto.FLOAT, None)],
        [helper.make_tensor("two", onnx.TensorProto.FLOAT, [], [2.0])],
    )
    node = helper.make_node(
        "FlexAttention", ["Q", "K", "V"], ["Y"], domain="ai.onnx.preview", score_mod=score_mod
    )
    shapes = {"Q": (1, 4, 3, 8), "K": (1, 2, 5, 8), "V": (1, 2, 5, 4)}
    graph = helper.make_graph(
        [node],
        "flex",
        [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, s) for n, s in shapes.items()],
        [helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, None)],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 26), helper.make_opsetid("ai.onnx.preview", 1)],
    )
    feeds = {n: randn(*s) for n, s in shapes.items()}
    expected = ReferenceEvaluator(model).run(None, feeds)[0]
    got = sonnx.prepare(model).run(feeds)[0].numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
