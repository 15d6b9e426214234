"""MaxPool, AveragePool, LpPool, global pooling and MaxUnpool: forward against torch and ONNX's
reference evaluator (ceil_mode, pads, count_include_pad, dilations, SAME_*), indices, gradients,
bad inputs and the export forms of older opsets."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from onnx import helper
from onnx.reference import ReferenceEvaluator

import sonnx.autograd as autograd
from sonnx.errors import BadInputError, ExportError
from sonnx.operators.pooling import windowed as pooling
from sonnx.proto.graph_builder import GraphBuilder
from sonnx.tensor import Tensor
from tests.helpers import check_grad

rng = np.random.default_rng(0)


def _t(a: np.ndarray) -> Tensor:
    return Tensor(data=a, requires_grad=False)


def randn(*shape: int, dtype=np.float32) -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


def reference(op_type: str, x: np.ndarray, outputs: int = 1, **attrs) -> list[np.ndarray]:
    node = helper.make_node(op_type, ["x"], [f"y{k}" for k in range(outputs)], **attrs)
    return ReferenceEvaluator(node).run(None, {"x": x})


def pool(op_type: str, x: np.ndarray, outputs: int = 1, **attrs):
    op = getattr(autograd, op_type)(**attrs)
    op.requested_outputs = outputs
    result = op(_t(x))
    return result.numpy() if outputs == 1 else [r.numpy() for r in result]


TRICKY = [
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1},
    {"kernel_shape": [2, 3], "strides": [2, 1], "pads": [0, 1, 2, 0]},
    {"kernel_shape": [3, 2], "strides": [2, 2], "auto_pad": "SAME_LOWER"},
    {"kernel_shape": [3, 3], "strides": [1, 2], "auto_pad": "SAME_UPPER"},
    {"kernel_shape": [2, 2], "strides": [2, 2], "dilations": [2, 2], "ceil_mode": 1},
    {"kernel_shape": [3, 2], "strides": [3, 2], "pads": [2, 1, 2, 1], "ceil_mode": 1},
]


# ---- MaxPool ----------------------------------------------------------------------------------


@pytest.mark.parametrize("attrs", TRICKY)
def test_max_pool_matches_reference(attrs):
    if attrs.get("auto_pad") == "SAME_LOWER":
        # The reference's strided MaxPool path pads SAME_LOWER like SAME_UPPER with
        # floor(in / stride) outputs, against the spec; its unit-stride path is right.
        attrs = {**attrs, "strides": [1, 1]}
    x = randn(2, 3, 7, 8)
    np.testing.assert_array_equal(pool("MaxPool", x, **attrs), reference("MaxPool", x, **attrs)[0])


@pytest.mark.parametrize("storage_order", [0, 1])
def test_max_pool_indices_match_reference(storage_order):
    x = randn(2, 3, 6, 7)
    attrs = {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 1, 1]}
    y, i = pool("MaxPool", x, 2, storage_order=storage_order, **attrs)
    ry, ri = reference("MaxPool", x, 2, storage_order=storage_order, **attrs)
    np.testing.assert_array_equal(y, ry)
    np.testing.assert_array_equal(i, ri)
    assert i.dtype == np.int64


@pytest.mark.parametrize(
    ("shape", "attrs"),
    [
        ((2, 2, 9), {"kernel_shape": [3], "strides": [2], "pads": [1, 2]}),
        ((1, 2, 5, 4, 6), {"kernel_shape": [2, 3, 2], "strides": [2, 1, 2], "pads": [1] * 6}),
        ((1, 2, 5, 4, 6), {"kernel_shape": [2, 2, 2], "strides": [1, 2, 2], "storage_order": 1}),
    ],
)
def test_max_pool_indices_1d_3d_match_reference(shape, attrs):
    x = randn(*shape)
    for got, expected in zip(
        pool("MaxPool", x, 2, **attrs), reference("MaxPool", x, 2, **attrs), strict=True
    ):
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
@pytest.mark.parametrize("op_type", ["MaxPool", "AveragePool", "LpPool"])
def test_pools_keep_float_types(op_type, dtype):
    x = randn(1, 2, 6, 5, dtype=dtype)
    attrs = {"kernel_shape": [3, 2], "strides": [2, 1], "pads": [1, 0, 1, 1]}
    y = pool(op_type, x, **attrs)
    assert y.dtype == dtype
    expected = reference(op_type, x.astype(np.float32), **attrs)[0]
    np.testing.assert_allclose(y.astype(np.float32), expected, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize(
    ("n", "kernel", "stride", "pad", "dilation", "ceil"),
    [(1, 3, 2, 1, 1, True), (2, 3, 2, 1, 2, True), (2, 2, 1, 0, 1, False), (3, 2, 2, 1, 1, True)],
)
def test_max_pool_matches_torch(n, kernel, stride, pad, dilation, ceil):
    x = randn(2, 2, *[7] * n)
    fn = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[n]
    expected, where = fn(torch.from_numpy(x), kernel, stride, pad, dilation, ceil, True)
    sonnx_fn = {1: autograd.max_pool1d, 2: autograd.max_pool2d, 3: autograd.max_pool3d}[n]
    y = sonnx_fn(_t(x), kernel, stride, pad, ceil, dilation)
    np.testing.assert_array_equal(y.numpy(), expected.numpy())
    # Without padding torch's per-plane indices plus the plane offset are ONNX's indices.
    if pad == 0:
        _, i = pool("MaxPool", x, 2, kernel_shape=[kernel] * n, strides=[stride] * n)
        planes = np.arange(4).reshape(2, 2, *[1] * n) * 7**n
        np.testing.assert_array_equal(i, where.numpy() + planes)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_max_pool_integers(dtype):
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max, (1, 2, 5, 5)).astype(dtype)
    y = pool("MaxPool", x, kernel_shape=[2, 2], strides=[2, 1])
    assert y.dtype == dtype
    np.testing.assert_array_equal(
        y, reference("MaxPool", x, kernel_shape=[2, 2], strides=[2, 1])[0]
    )
    # With padding (which the reference cannot do for integers) it equals float pooling.
    attrs = {"kernel_shape": [2, 2], "pads": [1, 1, 0, 0]}
    padded = pool("MaxPool", x, **attrs)
    np.testing.assert_array_equal(padded, pool("MaxPool", x.astype(np.float32), **attrs))


SEPARABLE_CASES = [
    (2, {"kernel_shape": [2, 2], "strides": [2, 2]}),
    (2, {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    (2, {"kernel_shape": [5, 5], "pads": [2, 2, 2, 2]}),
    (2, {"kernel_shape": [2, 1], "strides": [2, 1]}),
    *[(2, attrs) for attrs in TRICKY if attrs.get("auto_pad") != "SAME_LOWER"],
    (3, {"kernel_shape": [2, 2, 2], "strides": [2, 2, 2]}),
    (3, {"kernel_shape": [3, 2, 3], "strides": [1, 2, 2], "pads": [1, 0, 1, 1, 0, 1]}),
    (3, {"kernel_shape": [2, 2, 2], "dilations": [1, 2, 1], "ceil_mode": 1, "strides": [2] * 3}),
]


def _max_pool_torch(x: torch.Tensor, attrs: dict) -> torch.Tensor:
    """torch's own max pooling of ``x`` with ``attrs`` (explicit -inf pads)."""
    n = x.dim() - 2
    pads = attrs.get("pads", [0] * 2 * n)
    padded = F.pad(
        x, [p for i in reversed(range(n)) for p in (pads[i], pads[n + i])], value=-np.inf
    )
    fn = {2: F.max_pool2d, 3: F.max_pool3d}[n]
    return fn(
        padded,
        attrs["kernel_shape"],
        attrs.get("strides", 1),
        0,
        attrs.get("dilations", 1),
        bool(attrs.get("ceil_mode", 0)),
    )


@pytest.mark.parametrize(("n", "attrs"), SEPARABLE_CASES)
def test_max_pool_of_a_channels_first_input_takes_maxima_of_views(n, attrs, monkeypatch):
    x = np.random.default_rng(n).standard_normal((2, 3, *[9, 8, 7][:n])).astype(np.float32)
    expected = reference("MaxPool", x, **attrs)[0]
    monkeypatch.setattr(pooling, "_MAX_POOL", {})  # torch's pooling is not called at all
    np.testing.assert_array_equal(pool("MaxPool", x, **attrs), expected)


def test_max_pool_of_one_channel_takes_maxima_of_views(monkeypatch):
    # Strides of one channel fit both orders; torch's kernel would take it channels-first.
    x = np.random.default_rng(5).standard_normal((3, 1, 12, 10)).astype(np.float32)
    attrs = {"kernel_shape": [2, 2], "strides": [2, 2]}
    expected = reference("MaxPool", x, **attrs)[0]
    monkeypatch.setattr(pooling, "_MAX_POOL", {})
    np.testing.assert_array_equal(pool("MaxPool", x, **attrs), expected)


@pytest.mark.parametrize("n", [2, 3])
def test_max_pool_maxima_of_views_propagate_nan_as_torch_does(n, monkeypatch):
    x = torch.randn(2, 3, *[7] * n, generator=torch.Generator().manual_seed(n))
    x[0, 1, 2, 3] = np.nan
    attrs = {"kernel_shape": [3] * n, "strides": [2] * n, "pads": [1] * 2 * n, "ceil_mode": 1}
    expected = _max_pool_torch(x, attrs)
    monkeypatch.setattr(pooling, "_MAX_POOL", {})
    y = autograd.MaxPool(**attrs)(Tensor(data=x, requires_grad=False)).numpy()
    np.testing.assert_array_equal(y, expected.numpy())
    assert np.isnan(y).sum() == torch.isnan(expected).sum() > 0


def _counting(calls: list[int], n: int, pool_fn):
    def counted(*args, **kwargs):
        calls.append(n)
        return pool_fn(*args, **kwargs)

    return counted


@pytest.mark.parametrize("n", [2, 3])
def test_max_pool_keeps_torch_pooling_for_channels_last_inputs_and_gradients(n, monkeypatch):
    calls: list[int] = []
    counted = {k: _counting(calls, k, f) for k, f in pooling._MAX_POOL.items()}
    monkeypatch.setattr(pooling, "_MAX_POOL", counted)
    attrs = {"kernel_shape": [2] * n, "strides": [2] * n}
    layout = {2: torch.channels_last, 3: torch.channels_last_3d}[n]
    x = torch.randn(2, 3, *[6] * n).contiguous(memory_format=layout)
    y = autograd.MaxPool(**attrs)(Tensor(data=x, requires_grad=False))
    np.testing.assert_array_equal(y.numpy(), _max_pool_torch(x, attrs).numpy())
    assert calls == [n]
    # A gradient through tied maxima goes to one input of each window, as torch's does (the
    # maxima of views would split it).
    zeros = torch.zeros(1, 1, *[4] * n, requires_grad=True)
    with torch.enable_grad():
        autograd.MaxPool(**attrs).forward(zeros).sum().backward()
    assert calls == [n, n]
    assert sorted(zeros.grad.unique().tolist()) == [0.0, 1.0]


def test_max_pool_windows_follow_the_input_shape():
    op = autograd.MaxPool(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    for shape in [(1, 2, 9, 9), (1, 2, 9, 9), (2, 2, 6, 11), (1, 2, 9, 9)]:
        x = randn(*shape)
        expected = reference("MaxPool", x, kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4)[0]
        np.testing.assert_array_equal(op(_t(x)).numpy(), expected)


def test_max_pool_gradient():
    x = rng.permutation(60).reshape(1, 3, 4, 5) / 7.0  # distinct values: no ties at the max
    check_grad(lambda x: autograd.max_pool2d(x, 3, 2, padding=[1, 0, 1, 1], ceil_mode=True), [x])


# ---- AveragePool and LpPool -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "attrs"),
    [
        (2, {"kernel_shape": [2, 2], "strides": [2, 2]}),
        (2, {"kernel_shape": [3, 3], "strides": [2, 2]}),  # a last row and column no window reads
        (2, {"kernel_shape": [3, 2], "strides": [1, 2], "count_include_pad": 1}),
        (3, {"kernel_shape": [2, 3, 2], "strides": [2, 1, 2]}),
    ],
)
def test_average_pool_of_a_channels_first_input_takes_running_sums(n, attrs, monkeypatch):
    x = np.random.default_rng(n).standard_normal((2, 3, *[9, 8, 7][:n])).astype(np.float32)
    expected = reference("AveragePool", x, **attrs)[0]
    monkeypatch.setattr(pooling, "_AVG_POOL", {})  # torch's pooling is not called at all
    np.testing.assert_allclose(pool("AveragePool", x, **attrs), expected, rtol=1e-6, atol=1e-7)


def test_average_pool_keeps_torch_pooling_for_channels_last_inputs_and_padding(monkeypatch):
    calls: list[int] = []
    counted = {k: _counting(calls, k, f) for k, f in pooling._AVG_POOL.items()}
    monkeypatch.setattr(pooling, "_AVG_POOL", counted)
    x = torch.randn(2, 3, 8, 8)
    attrs = {"kernel_shape": [2, 2], "strides": [2, 2]}
    cl = autograd.AveragePool(**attrs)(Tensor(data=x.contiguous(memory_format=torch.channels_last)))
    np.testing.assert_allclose(cl.numpy(), F.avg_pool2d(x, 2, 2).numpy(), rtol=1e-6)
    padded = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1}
    y = autograd.AveragePool(**padded)(Tensor(data=x, requires_grad=False))
    np.testing.assert_allclose(y.numpy(), F.avg_pool2d(x, 3, 1, 1).numpy(), rtol=1e-6)
    assert calls == [2, 2]


@pytest.mark.parametrize("count_include_pad", [0, 1])
@pytest.mark.parametrize("attrs", TRICKY)
def test_average_pool_matches_reference(attrs, count_include_pad):
    x = randn(2, 3, 7, 8)
    attrs = {**attrs, "count_include_pad": count_include_pad}
    np.testing.assert_allclose(
        pool("AveragePool", x, **attrs),
        reference("AveragePool", x, **attrs)[0],
        rtol=1e-5,
        atol=1e-6,
    )


@pytest.mark.parametrize("count_include_pad", [False, True])
@pytest.mark.parametrize("ceil_mode", [False, True])
def test_average_pool_matches_torch(ceil_mode, count_include_pad):
    x = randn(2, 3, 8, 7)
    expected = F.avg_pool2d(
        torch.from_numpy(x), (3, 2), (2, 2), (1, 1), ceil_mode, count_include_pad
    ).numpy()
    y = autograd.avg_pool2d(_t(x), (3, 2), 2, 1, ceil_mode, count_include_pad)
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-5, atol=1e-6)
    x1 = randn(1, 2, 9)
    np.testing.assert_allclose(
        autograd.avg_pool1d(_t(x1), 4, 3, 2, ceil_mode, count_include_pad).numpy(),
        F.avg_pool1d(torch.from_numpy(x1), 4, 3, 2, ceil_mode, count_include_pad).numpy(),
        rtol=1e-5,
        atol=1e-6,
    )


def test_average_pool_3d_dilated_matches_reference():
    x = randn(1, 2, 6, 5, 7)
    attrs = {
        "kernel_shape": [2, 2, 3],
        "strides": [2, 1, 2],
        "dilations": [2, 1, 2],
        "ceil_mode": 1,
    }
    np.testing.assert_allclose(
        autograd.avg_pool3d(_t(x), (2, 2, 3), (2, 1, 2), 0, True, dilation=(2, 1, 2)).numpy(),
        reference("AveragePool", x, **attrs)[0],
        rtol=1e-5,
    )


def test_average_pool_gradient():
    check_grad(
        lambda x: autograd.avg_pool2d(
            x, 3, 2, padding=[1, 0, 0, 1], ceil_mode=True, count_include_pad=False
        ),
        [rng.standard_normal((1, 2, 5, 4))],
    )


@pytest.mark.parametrize("attrs", TRICKY[:4])
def test_lp_pool_matches_reference(attrs):
    x = randn(1, 2, 6, 7)
    attrs = {k: v for k, v in attrs.items() if k != "ceil_mode"}
    np.testing.assert_allclose(
        pool("LpPool", x, p=3, **attrs), reference("LpPool", x, p=3, **attrs)[0], rtol=1e-4
    )


def test_lp_pool_function_and_gradient():
    x = randn(1, 2, 6, 6)
    expected = F.lp_pool2d(torch.from_numpy(x), 2, 2, 2).numpy()
    np.testing.assert_allclose(autograd.lp_pool2d(_t(x), 2, 2).numpy(), expected, rtol=1e-5)
    check_grad(lambda x: autograd.lp_pool2d(x, 3, 2, 1), [rng.standard_normal((1, 1, 4, 5))])


# ---- global pooling and MaxUnpool -------------------------------------------------------------


def test_global_pools():
    x = randn(2, 3, 4, 5, 2)
    np.testing.assert_allclose(
        autograd.globalaveragepool(_t(x)).numpy(), x.mean(axis=(2, 3, 4), keepdims=True), rtol=1e-5
    )
    np.testing.assert_array_equal(
        autograd.globalmaxpool(_t(x)).numpy(), x.max(axis=(2, 3, 4), keepdims=True)
    )
    np.testing.assert_allclose(
        autograd.globallppool(_t(x), 3).numpy(),
        (np.abs(x) ** 3).sum(axis=(2, 3, 4), keepdims=True) ** (1 / 3),
        rtol=1e-5,
    )
    with pytest.raises(BadInputError, match="GlobalAveragePool: input X must be"):
        autograd.globalaveragepool(_t(randn(2, 3)))


def test_global_pool_gradients():
    x = rng.standard_normal((2, 2, 3, 3))
    check_grad(autograd.globalaveragepool, [x])
    check_grad(autograd.globalmaxpool, [x])
    check_grad(lambda x: autograd.globallppool(x, 2), [x])


def test_max_unpool_inverts_max_pool():
    x = randn(2, 2, 4, 6)
    op = autograd.MaxPool(kernel_shape=[2, 2], strides=[2, 2])
    op.requested_outputs = 2
    y, i = op(_t(x))
    restored = autograd.max_unpool(y, i, 2).numpy()
    expected = F.max_unpool2d(*F.max_pool2d(torch.from_numpy(x), 2, return_indices=True), 2)
    np.testing.assert_array_equal(restored, expected.numpy())
    shape = _t(np.array([2, 2, 5, 7], np.int64))
    grown = autograd.MaxUnpool(kernel_shape=[2, 2], strides=[2, 2])(y, i, shape).numpy()
    np.testing.assert_array_equal(grown[:, :, :4, :6], restored)
    assert not grown[:, :, 4:].any() and not grown[:, :, :, 6:].any()


def test_max_unpool_gradient_and_errors():
    indices = np.array([[[[0, 3], [9, 14]]]], np.int64)
    check_grad(
        lambda x, i: autograd.MaxUnpool(kernel_shape=[2, 2], strides=[2, 2])(x, i),
        [rng.standard_normal((1, 1, 2, 2)), indices],
        wrt=[0],
    )
    with pytest.raises(BadInputError, match=r"MaxUnpool: input I must hold indices in \[0, 16\)"):
        autograd.MaxUnpool(kernel_shape=[2, 2], strides=[2, 2])(
            _t(randn(1, 1, 2, 2)), _t(indices + 10)
        )


# ---- bad inputs and export --------------------------------------------------------------------


def test_pool_bad_inputs():
    with pytest.raises(BadInputError, match="MaxPool: attribute kernel_shape must give 2"):
        autograd.MaxPool(kernel_shape=[2])(_t(randn(1, 1, 4, 4)))
    with pytest.raises(BadInputError, match=r"AveragePool: input X must be 3-D to 5-D"):
        autograd.AveragePool(kernel_shape=[2])(_t(randn(4, 4)))
    with pytest.raises(BadInputError, match="does not fit"):
        autograd.max_pool2d(_t(randn(1, 1, 2, 2)), 3)
    with pytest.raises(BadInputError, match="max_pool2d: stride must be"):
        autograd.max_pool2d(_t(randn(1, 1, 4, 4)), 2, stride=(1, 1, 1))


def test_pool_export_for_older_opsets():
    g = GraphBuilder(9)
    autograd.MaxPool(kernel_shape=[2, 2], ceil_mode=0, dilations=[1, 1]).export(g, ["x"], ["y"])
    assert {a.name for a in g.nodes[0].attribute} == {"kernel_shape"}
    with pytest.raises(ExportError, match="MaxPool: attribute ceil_mode=1 needs opset 10"):
        autograd.MaxPool(kernel_shape=[2, 2], ceil_mode=1).export(GraphBuilder(9), ["x"], ["y"])
    with pytest.raises(ExportError, match="AveragePool: attribute dilations"):
        autograd.AveragePool(kernel_shape=[2], dilations=[2]).export(GraphBuilder(18), ["x"], ["y"])
    g = GraphBuilder(11)
    autograd.LpPool(version=1, kernel_shape=[2, 2], p=2.0).export(g, ["x"], ["y"])
    p = next(a for a in g.nodes[0].attribute if a.name == "p")
    assert p.i == 2
    autograd.GlobalLpPool(version=1, p=3.0).export(g, ["x"], ["z"])
    assert next(a for a in g.nodes[1].attribute if a.name == "p").i == 3
    with pytest.raises(ExportError, match=r"GlobalLpPool: p=2.5 is not an integer"):
        autograd.GlobalLpPool(version=1, p=2.5).export(g, ["x"], ["w"])


# ---- import at older opsets -------------------------------------------------------------------


def _single_node_model(node, x: np.ndarray, outputs: int, opset: int):
    from onnx import TensorProto

    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [
            helper.make_tensor_value_info(f"y{k}", TensorProto.UNDEFINED, None)
            for k in range(outputs)
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize(
    ("op_type", "opset", "outputs", "attrs"),
    [
        ("MaxPool", 8, 2, {"kernel_shape": [2, 2], "strides": [2, 2], "storage_order": 1}),
        ("MaxPool", 1, 1, {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
        ("AveragePool", 1, 1, {"kernel_shape": [3, 3], "pads": [1, 0, 1, 0]}),
        (
            "AveragePool",
            7,
            1,
            {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1},
        ),
        ("LpPool", 1, 1, {"kernel_shape": [2, 2], "p": 3.0}),
    ],
)
def test_import_older_opsets(op_type, opset, outputs, attrs):
    import sonnx

    x = randn(1, 2, 6, 6)
    node = helper.make_node(op_type, ["x"], [f"y{k}" for k in range(outputs)], **attrs)
    got = sonnx.prepare(_single_node_model(node, x, outputs, opset)).run({"x": x})
    new_attrs = {**attrs, "p": 3} if "p" in attrs else attrs
    expected = reference(op_type, x, outputs, **new_attrs)
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g.numpy(), e, rtol=1e-5)


def test_import_global_lp_pool_opset_1_float_p():
    import sonnx

    x = randn(1, 2, 4, 3)
    node = helper.make_node("GlobalLpPool", ["x"], ["y0"], p=3.0)
    (y,) = sonnx.prepare(_single_node_model(node, x, 1, 1)).run({"x": x})
    expected = (np.abs(x) ** 3).sum(axis=(2, 3), keepdims=True) ** (1 / 3)
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-5)


def test_exported_pools_and_convs_match_onnxruntime():
    import onnxruntime as ort

    from sonnx.onnx.exporter import to_onnx

    x = _t(randn(1, 2, 9, 8))
    w_t, w = _t(randn(2, 3, 3, 3)), _t(randn(4, 1, 3, 3))
    outs = [
        autograd.max_pool2d(x, 3, 2, [1, 0, 2, 1], ceil_mode=True, dilation=2),
        autograd.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
        autograd.avg_pool2d(x, 3, 2, [2, 0, 0, 1], ceil_mode=True, count_include_pad=True),
        autograd.avg_pool2d(x, 2, 1, dilation=2),
        autograd.lp_pool2d(x, 2, 3),
        autograd.globalaveragepool(x),
        autograd.conv_transpose2d(x, w_t, stride=2, padding=[0, 1, 1, 0], output_padding=1),
        autograd.conv2d(x, w, group=2, padding=[0, 1, 2, 1], dilation=2),
    ]
    session = ort.InferenceSession(to_onnx([x], outs).SerializeToString())
    results = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    for got, out in zip(results, outs, strict=True):
        np.testing.assert_allclose(got, out.numpy(), rtol=1e-5, atol=1e-6)
