"""onnxruntime's fused normalizations and activations (com.microsoft, and the default-domain
SimplifiedLayerNormalization): single-node models imported and run by sonnx against
onnxruntime's CPU kernels (a NumPy reference for the CUDA-only BiasAdd, BiasSplitGelu,
GroupNorm and SkipGroupNorm), exported back as they came, gradients against finite differences.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
import pytest
import torch
from onnx import helper

import sonnx
from sonnx.errors import BadInputError, BadModelError
from sonnx.onnx.exporter import to_onnx
from sonnx.operators.normalization.contrib_activations import (
    BiasAdd,
    BiasGelu,
    BiasSplitGelu,
    FastGelu,
    QuickGelu,
)
from sonnx.operators.normalization.contrib_skip import (
    EmbedLayerNormalization,
    GroupNorm,
    SimplifiedLayerNormalization,
    SkipGroupNorm,
    SkipLayerNormalization,
    SkipSimplifiedLayerNormalization,
)
from sonnx.tensor import Tensor, to_numpy
from tests.onnx.export_check import ort_session

MS = "com.microsoft"
F32 = np.float32
Inputs = list[tuple[str, np.ndarray | None]]


def _rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng([seed, *shape]).standard_normal(shape).astype(F32)


def _output_infos(
    outputs: list[str], results: list[np.ndarray] | None
) -> list[onnx.ValueInfoProto]:
    """Untyped outputs (onnxruntime infers them), or typed as ``results`` (the exporter copies
    the source graph's outputs, which the ONNX checker wants typed)."""
    names = [o for o in outputs if o]
    if results is None:
        return [helper.make_empty_tensor_value_info(o) for o in names]
    return [
        helper.make_tensor_value_info(o, helper.np_dtype_to_tensor_dtype(r.dtype), r.shape)
        for o, r in zip(names, results, strict=True)
    ]


def _model(
    op: str,
    inputs: Inputs,
    outputs: list[str],
    domain: str = MS,
    results: list[np.ndarray] | None = None,
    **attrs,
) -> onnx.ModelProto:
    """One ``op`` node; absent inputs (None) and outputs ("") keep their positions empty."""
    names = ["" if a is None else n for n, a in inputs]
    node = helper.make_node(op, names, outputs, domain=domain, name="node", **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
         for n, a in inputs if a is not None],
        _output_infos(outputs, results),
    )  # fmt: skip
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=10)


def _feeds(inputs: Inputs) -> dict[str, np.ndarray]:
    return {n: a for n, a in inputs if a is not None}


def _run_sonnx(model: onnx.ModelProto, inputs: Inputs) -> tuple[list[Tensor], list[Tensor]]:
    given = [Tensor(data=a, requires_grad=False, name=n) for n, a in _feeds(inputs).items()]
    return given, list(sonnx.prepare(model).run({t.name: t for t in given}))


def _attributes(node: onnx.NodeProto) -> dict[str, onnx.AttributeProto]:
    return {a.name: a for a in node.attribute}


def _check(
    op: str,
    inputs: Inputs,
    outputs: list[str],
    domain: str = MS,
    reference: Callable[..., list[np.ndarray]] | None = None,
    rtol: float = 1e-4,
    **attrs,
) -> None:
    """sonnx equals onnxruntime (or ``reference`` for the CUDA-only ops) at 1e-4 relative,
    and the export of the run is the node as it came, which runs to the same outputs."""
    feeds = _feeds(inputs)
    if reference is None:
        expected = ort_session(_model(op, inputs, outputs, domain, **attrs)).run(None, feeds)
    else:
        expected = reference(*feeds.values())
    model = _model(op, inputs, outputs, domain, expected, **attrs)
    given, got = _run_sonnx(model, inputs)
    assert len(got) == len(expected)
    for e, g in zip(expected, got, strict=True):
        assert to_numpy(g).dtype == e.dtype and to_numpy(g).shape == e.shape
        np.testing.assert_allclose(to_numpy(g), e, rtol=rtol, atol=rtol / 10)
    exported = to_onnx(given, got)
    (node,) = (n for n in exported.graph.node if n.op_type != "Constant")
    (source,) = model.graph.node
    assert (node.op_type, node.domain) == (op, domain)
    assert _attributes(node) == _attributes(source)
    assert [bool(n) for n in node.input] == [bool(n) for n in source.input]
    if reference is None:
        again = ort_session(exported).run(None, {t.name: to_numpy(t) for t in given})
        for e, g in zip(expected, again, strict=True):
            np.testing.assert_allclose(g, e, rtol=rtol, atol=rtol / 10)


# ---- SkipLayerNormalization and SkipSimplifiedLayerNormalization ----------------------------

X, H = _rand(2, 3, 8), 8


@pytest.mark.parametrize("skip_shape", [(2, 3, 8), (1, 3, 8), (3, 8)])
@pytest.mark.parametrize("beta", [True, False])
@pytest.mark.parametrize("bias", [True, False])
def test_skip_layer_norm_broadcasts_skip_with_optional_beta_and_bias(skip_shape, beta, bias):
    inputs = [("x", X), ("skip", _rand(*skip_shape, seed=1)), ("gamma", _rand(H, seed=2)),
              ("beta", _rand(H, seed=3) if beta else None),
              ("bias", _rand(H, seed=4) if bias else None)]  # fmt: skip
    _check("SkipLayerNormalization", inputs, ["y"], epsilon=1e-5)


@pytest.mark.parametrize("outputs", [["y", "mean", "inv_std", "sum"], ["y", "", "", "sum"],
                                     ["y", "mean", "inv_std"]])  # fmt: skip
def test_skip_layer_norm_optional_outputs_and_default_epsilon(outputs) -> None:
    inputs = [("x", _rand(6, 8) + 2), ("skip", _rand(6, 8, seed=1)), ("gamma", _rand(H, seed=2)),
              ("beta", _rand(H, seed=3)), ("bias", _rand(H, seed=4))]  # fmt: skip
    _check("SkipLayerNormalization", inputs, outputs)


@pytest.mark.parametrize("bias", [True, False])
def test_skip_simplified_layer_norm_outputs(bias) -> None:
    inputs = [("x", X), ("skip", _rand(1, 3, 8, seed=1)), ("gamma", _rand(H, seed=2)),
              ("bias", _rand(H, seed=4) if bias else None)]  # fmt: skip
    _check("SkipSimplifiedLayerNormalization", inputs, ["y", "mean", "inv_std", "sum"])
    _check("SkipSimplifiedLayerNormalization", inputs, ["y"], epsilon=1e-6)


def test_skip_norms_reject_a_skip_that_does_not_broadcast() -> None:
    op = SkipLayerNormalization()
    x, g = torch.tensor(X), torch.ones(H)
    with pytest.raises(BadInputError, match=r"skip must have shape \(2, 3, 8\).*\(2, 8\)"):
        op.forward(x, torch.ones(2, 8), g)
    with pytest.raises(BadInputError, match=r"gamma must have shape \(8,\).*\(4,\)"):
        op.forward(x, x, torch.ones(4))
    with pytest.raises(BadInputError, match="input must be 3-D"):
        op.forward(torch.ones(8), torch.ones(8), g)


@pytest.mark.parametrize("op", ["SkipLayerNormalization", "SkipSimplifiedLayerNormalization"])
def test_skip_norms_in_float16_keep_float32_statistics(op) -> None:
    half = [_rand(2, 3, 8), _rand(2, 3, 8, seed=1), _rand(H, seed=2), _rand(H, seed=4)]
    names = ["x", "skip", "gamma", "bias"]
    if op == "SkipLayerNormalization":
        names.insert(3, "beta")
        half.insert(3, _rand(H, seed=3))
    inputs = [(n, a.astype(np.float16)) for n, a in zip(names, half, strict=True)]
    # the sum is rounded to float16 once, from float32, as onnxruntime rounds it
    _check(op, inputs, ["y", "mean", "inv_std", "sum"], rtol=1e-3)


# ---- SimplifiedLayerNormalization (default domain) -------------------------------------------


@pytest.mark.parametrize(
    ("shape", "attrs"),
    [((2, 3, 8), {}), ((2, 3, 8), {"epsilon": 1e-3}), ((2, 3, 4, 2), {"axis": -2}),
     ((2, 3, 8), {"axis": 1, "stash_type": 1})],
)  # fmt: skip
@pytest.mark.parametrize("outputs", [["y"], ["y", "inv_std"]])
def test_simplified_layer_norm(shape, attrs, outputs) -> None:
    axis = attrs.get("axis", -1) % len(shape)
    inputs = [("x", _rand(*shape)), ("scale", _rand(*shape[axis:], seed=2))]
    _check("SimplifiedLayerNormalization", inputs, outputs, domain="", **attrs)


# ---- EmbedLayerNormalization -----------------------------------------------------------------

IDS = np.random.default_rng(5).integers(0, 10, (2, 4)).astype(np.int32)


def _embed_inputs(segments: bool, mask: np.ndarray | None, positions: np.ndarray | None) -> Inputs:
    return [("ids", IDS), ("segment_ids", IDS % 2 if segments else None),
            ("word", _rand(10, 8)), ("position", _rand(6, 8, seed=1)),
            ("segment", _rand(2, 8, seed=2) if segments else None),
            ("gamma", _rand(8, seed=3)), ("beta", _rand(8, seed=4)),
            ("mask", mask), ("position_ids", positions)]  # fmt: skip


MASK = np.array([[1, 1, 0, 0], [1, 1, 1, 2]], np.int32)


@pytest.mark.parametrize("segments", [True, False])
@pytest.mark.parametrize("mask", [MASK, None], ids=["mask", "no_mask"])
@pytest.mark.parametrize(
    "positions",
    [None, np.array([[5, 0, 3, 1]], np.int32), np.array([[1, 2, 3, 4], [0, 0, 1, 1]], np.int32)],
    ids=["default", "shared", "per_row"],
)
def test_embed_layer_norm(segments, mask, positions) -> None:
    inputs = _embed_inputs(segments, mask, positions)
    _check("EmbedLayerNormalization", inputs, ["y", "mask_index", "sum"])
    _check("EmbedLayerNormalization", inputs, ["y", "mask_index"], epsilon=1e-5)


def test_embed_layer_norm_rejects_ids_out_of_range_and_half_segments() -> None:
    op = EmbedLayerNormalization()
    w, p, g = torch.ones(10, 8), torch.ones(6, 8), torch.ones(8)
    ids = torch.tensor(IDS)
    with pytest.raises(BadInputError, match=r"word_embedding must be in \[0, 9\].*\[3, 11\]"):
        op.forward(ids + 3, None, w, p, None, g, g)
    with pytest.raises(BadInputError, match="given together, received only segment_ids"):
        op.forward(ids, ids % 2, w, p, None, g, g)
    with pytest.raises(BadInputError, match=r"2-D int32.*\(8,\)"):
        op.forward(ids.reshape(-1), None, w, p, None, g, g)


# ---- activations -----------------------------------------------------------------------------


def test_gelu_family_against_onnxruntime() -> None:
    x, b = _rand(2, 3, 8) * 3, _rand(8, seed=1)
    _check("Gelu", [("x", x)], ["y"])
    _check("BiasGelu", [("a", x), ("b", b)], ["y"])
    _check("FastGelu", [("x", x), ("bias", b)], ["y"])
    _check("FastGelu", [("x", x)], ["y"])
    _check("QuickGelu", [("x", x)], ["y"])
    _check("QuickGelu", [("x", x)], ["y"], alpha=1.0)


def _gelu(v: np.ndarray) -> np.ndarray:
    return (torch.nn.functional.gelu(torch.tensor(v, dtype=torch.float64))).numpy()


def test_bias_add_and_bias_split_gelu_against_their_formulas() -> None:
    x, b, skip = _rand(2, 5, 8), _rand(8, seed=1), _rand(2, 5, 8, seed=2)
    _check("BiasAdd", [("x", x), ("bias", b), ("skip", skip)], ["y"],
           reference=lambda x, b, s: [x + b + s])  # fmt: skip

    def split_gelu(x: np.ndarray, b: np.ndarray) -> list[np.ndarray]:
        s = (x + b).astype(np.float64)
        return [(s[..., :4] * _gelu(s[..., 4:])).astype(F32)]

    _check("BiasSplitGelu", [("x", x), ("bias", b)], ["y"], reference=split_gelu)
    with pytest.raises(BadInputError, match="must be even"):
        BiasSplitGelu().forward(torch.ones(1, 2, 3), torch.ones(3))
    with pytest.raises(BadInputError, match=r"skip must have X's shape"):
        BiasAdd().forward(torch.ones(1, 2, 3), torch.ones(3), torch.ones(2, 3))
    with pytest.raises(BadInputError, match=r"bias must have shape \(8,\)"):
        BiasGelu().forward(torch.tensor(x), torch.ones(5))


# ---- GroupNorm and SkipGroupNorm -------------------------------------------------------------


def _group_norm_nhwc(x, gamma, beta, groups: int, eps: float, silu: bool) -> np.ndarray:
    n, h, w, c = x.shape
    g = x.astype(np.float64).reshape(n, h * w, groups, c // groups)
    mean = g.mean(axis=(1, 3), keepdims=True)
    var = g.var(axis=(1, 3), keepdims=True)
    y = ((g - mean) / np.sqrt(var + eps)).reshape(n, h, w, c) * gamma + beta
    if silu:
        y = y / (1 + np.exp(-y))
    return y.astype(F32)


@pytest.mark.parametrize("activation", [0, 1])
@pytest.mark.parametrize("channels_last", [1, 0, None])
def test_group_norm(activation, channels_last) -> None:
    x, gamma, beta = _rand(2, 3, 3, 8), _rand(8, seed=1), _rand(8, seed=2)
    attrs = {"groups": 4, "activation": activation, "epsilon": 1e-3}
    if channels_last is not None:
        attrs["channels_last"] = channels_last
    nchw = channels_last == 0
    data = x.transpose(0, 3, 1, 2).copy() if nchw else x

    def reference(data, gamma, beta):
        nhwc = data.transpose(0, 2, 3, 1) if nchw else data
        y = _group_norm_nhwc(nhwc, gamma, beta, 4, 1e-3, activation == 1)
        return [y.transpose(0, 3, 1, 2) if nchw else y]

    inputs = [("x", data), ("gamma", gamma), ("beta", beta)]
    _check("GroupNorm", inputs, ["y"], reference=reference, **attrs)


@pytest.mark.parametrize("skip_shape", [(2, 3, 3, 8), (2, 1, 1, 8), (2, 8)])
@pytest.mark.parametrize("bias", [True, False])
def test_skip_group_norm(skip_shape, bias) -> None:
    x, gamma, beta = _rand(2, 3, 3, 8), _rand(8, seed=1), _rand(8, seed=2)
    skip = _rand(*skip_shape, seed=3)
    inputs = [("x", x), ("gamma", gamma), ("beta", beta), ("skip", skip),
              ("bias", _rand(8, seed=4) if bias else None)]  # fmt: skip

    def reference(x, gamma, beta, skip, bias=0.0):
        s = x + skip.reshape(2, 1, 1, 8) if skip.ndim == 2 else x + skip
        s = s + bias
        return [_group_norm_nhwc(s, gamma, beta, 2, 1e-5, True), s]

    _check("SkipGroupNorm", inputs, ["y", "s"], reference=reference, groups=2, activation=1)


def test_group_norms_need_groups_that_divide_the_channels_and_nhwc_skips() -> None:
    x, v = torch.ones(1, 2, 2, 6), torch.ones(6)
    with pytest.raises(BadModelError, match="required attribute 'groups'"):
        GroupNorm(activation=0).forward(x, v, v)
    with pytest.raises(BadInputError, match="groups must divide the 6 channels, received 4"):
        GroupNorm(groups=4, activation=0).forward(x, v, v)
    with pytest.raises(BadInputError, match="only channels_last=1"):
        SkipGroupNorm(groups=2, activation=0, channels_last=0).forward(x, v, v, x)
    with pytest.raises(BadInputError, match=r"skip must have shape"):
        SkipGroupNorm(groups=2, activation=0).forward(x, v, v, torch.ones(1, 2, 6))


# ---- gradients -------------------------------------------------------------------------------


def _double(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.tensor(_rand(*shape, seed=seed), dtype=torch.float64, requires_grad=True)


GRADIENT_CASES = {
    "SkipLayerNormalization": (SkipLayerNormalization(),
                               lambda: [_double(2, 3, 8), _double(3, 8, seed=1),
                                        _double(8, seed=2), _double(8, seed=3),
                                        _double(8, seed=4)]),
    "SkipSimplifiedLayerNormalization": (SkipSimplifiedLayerNormalization(),
                                         lambda: [_double(2, 3, 8), _double(2, 3, 8, seed=1),
                                                  _double(8, seed=2), _double(8, seed=4)]),
    "SimplifiedLayerNormalization": (SimplifiedLayerNormalization(),
                                     lambda: [_double(2, 3, 8), _double(8, seed=2)]),
    "EmbedLayerNormalization": (EmbedLayerNormalization(),
                                lambda: [torch.tensor(IDS), torch.tensor(IDS % 2),
                                         _double(10, 8), _double(6, 8, seed=1),
                                         _double(2, 8, seed=2), _double(8, seed=3),
                                         _double(8, seed=4)]),
    "GroupNorm": (GroupNorm(groups=2, activation=1),
                  lambda: [_double(2, 3, 3, 4), _double(4, seed=1), _double(4, seed=2)]),
    "SkipGroupNorm": (SkipGroupNorm(groups=2, activation=0),
                      lambda: [_double(2, 3, 3, 4), _double(4, seed=1), _double(4, seed=2),
                               _double(2, 4, seed=3), _double(4, seed=4)]),
    "BiasGelu": (BiasGelu(), lambda: [_double(2, 3, 8), _double(8, seed=1)]),
    "FastGelu": (FastGelu(), lambda: [_double(2, 3, 8), _double(8, seed=1)]),
    "QuickGelu": (QuickGelu(), lambda: [_double(2, 3, 8)]),
    "BiasSplitGelu": (BiasSplitGelu(), lambda: [_double(2, 3, 8), _double(8, seed=1)]),
}  # fmt: skip


@pytest.mark.parametrize("name", GRADIENT_CASES)
def test_gradients_equal_finite_differences_on_a_few_weights(name) -> None:
    op, make = GRADIENT_CASES[name]
    args = make()
    floats = [a for a in args if a.dtype == torch.float64]
    probe = torch.tensor(_rand(*op.forward(*args).shape, seed=9), dtype=torch.float64)

    def loss() -> torch.Tensor:
        out = op.forward(*args)
        return ((out if isinstance(out, torch.Tensor) else out[0]) * probe).sum()

    grads = torch.autograd.grad(loss(), floats)
    step = 1e-6
    with torch.no_grad():
        for tensor, grad in zip(floats, grads, strict=True):
            flat, expected = tensor.view(-1), grad.reshape(-1)
            for i in (0, flat.numel() // 2, flat.numel() - 1):
                flat[i] += step
                up = loss()
                flat[i] -= 2 * step
                down = loss()
                flat[i] += step
                assert abs(float((up - down) / (2 * step)) - float(expected[i])) < 1e-5
