"""com.microsoft fused float products (FusedMatMul, FusedGemm, FusedConv) against
onnxruntime's CPU kernels on single-node models; gradients against finite differences."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sonnx
from sonnx.errors import BadInputError
from sonnx.onnx.exporter import to_onnx
from sonnx.operators.linalg.contrib_fused import FusedConv, FusedGemm, FusedMatMul, NhwcConv
from sonnx.tensor import Tensor, to_numpy
from tests.contrib_quant_helpers import both, node_model, ort_run, sonnx_run
from tests.helpers import check_grad

RNG = np.random.default_rng(1)
F32 = np.float32


def randn(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(F32)


def compare(op_type: str, inputs: dict, graph_inputs, **attrs) -> None:
    model = node_model(op_type, inputs, graph_inputs, **attrs)
    (expected,), (got,) = both(model, {n: inputs[n] for n in graph_inputs})
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    ("a_shape", "b_shape", "attrs"),
    [
        ((3, 4), (4, 5), {"alpha": 0.5}),
        ((4, 3), (5, 4), {"transA": 1, "transB": 1}),
        ((2, 3, 4), (4, 5), {"alpha": 2.0}),
        ((3, 2, 4), (2, 4, 5), {"transBatchA": 1}),
        ((3, 2, 4), (4, 2, 5), {"transBatchA": 1, "transBatchB": 1, "alpha": 1.5}),
        ((4, 2, 3), (2, 5, 4), {"transBatchA": 1, "transA": 1, "transB": 1}),
        ((2, 1, 3, 4), (6, 5, 4), {"transB": 1}),
    ],
)
def test_fused_matmul_matches_onnxruntime(a_shape, b_shape, attrs):
    compare("FusedMatMul", {"A": randn(*a_shape), "B": randn(*b_shape)}, ["A", "B"], **attrs)


ACTIVATIONS = [
    {"activation": "Relu"},
    {"activation": "Tanh"},
    {"activation": "Sigmoid"},
    {"activation": "LeakyRelu", "activation_alpha": 0.2},
    {"activation": "ThresholdedRelu", "activation_alpha": 0.3},
    {"activation": "HardSigmoid", "activation_alpha": 0.3, "activation_beta": 0.4},
    {"activation": "Elu", "activation_alpha": 0.7},
    {"activation": "Selu", "activation_alpha": 1.5, "activation_gamma": 1.1},
    {"activation": "Softplus"},
    {"activation": "Softsign"},
]


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_fused_gemm_matches_onnxruntime(activation):
    inputs = {"A": randn(4, 3), "B": randn(5, 4), "C": randn(5)}
    attrs = {"transA": 1, "transB": 1, "alpha": 0.7, "beta": 1.3, **activation}
    compare("FusedGemm", inputs, ["A"], **attrs)


@pytest.mark.parametrize(
    "activation",
    [
        {},
        {"activation": "Relu"},
        {"activation": "Tanh"},
        {"activation": "Sigmoid"},
        {"activation": "LeakyRelu", "activation_params": [0.1]},
        {"activation": "Clip", "activation_params": [-0.5, 0.8]},
        {"activation": "HardSigmoid", "activation_params": [0.25, 0.5]},
    ],
)
@pytest.mark.parametrize("with_z", [False, True])
def test_fused_conv_matches_onnxruntime(activation, with_z):
    inputs = {"X": randn(2, 4, 7, 6), "W": randn(6, 2, 3, 3), "B": randn(6)}
    if with_z:
        inputs["Z"] = randn(2, 6, 4, 6)
    attrs = {"group": 2, "strides": [2, 1], "pads": [1, 1, 1, 1], **activation}
    compare("FusedConv", inputs, ["X"], **attrs)


def test_fused_products_gradients():
    check_grad(
        lambda a, b: FusedMatMul(transBatchA=1, transB=1, alpha=0.5)(a, b),
        [RNG.standard_normal((3, 2, 4)), RNG.standard_normal((2, 5, 4))],
    )
    check_grad(
        lambda a, b, c: FusedGemm(activation="Tanh", transA=1)(a, b, c),
        [RNG.standard_normal((4, 3)), RNG.standard_normal((4, 5)), RNG.standard_normal(5)],
    )
    check_grad(
        lambda x, w, b, z: FusedConv(activation="Sigmoid", pads=[1, 1, 1, 1])(x, w, b, z),
        [RNG.standard_normal(s) for s in ((1, 2, 4, 4), (3, 2, 3, 3), (3,), (1, 3, 4, 4))],
    )


@pytest.mark.parametrize(
    ("attrs", "message"),
    [
        ({"activation": "Gelu"}, "activation must be one of .* received 'Gelu'"),
        ({"activation": "LeakyRelu"}, r"LeakyRelu needs its parameters \['alpha'\]"),
    ],
)
def test_fused_gemm_rejects_a_bad_activation(attrs, message):
    with pytest.raises(BadInputError, match=message):
        FusedGemm(**attrs).forward(torch.ones(2, 2), torch.ones(2, 2))


@pytest.mark.parametrize(
    ("x_shape", "w_shape", "attrs"),
    [
        ((2, 7, 6, 4), (6, 3, 3, 2), {"group": 2, "strides": [2, 1], "pads": [1, 1, 1, 1]}),
        ((1, 5, 5, 3), (4, 3, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
        ((2, 9, 3), (5, 2, 3), {"pads": [0, 1]}),
    ],
    ids=["2d_groups", "2d_same_upper", "1d_asymmetric"],
)
def test_nhwc_conv_is_conv_on_channels_last_tensors(x_shape, w_shape, attrs):
    """onnxruntime has no CPU kernel for NhwcConv: its reference is onnxruntime's Conv on the
    same tensors moved channels-first, the result moved back."""
    x, w, b = randn(*x_shape), randn(*w_shape), randn(w_shape[0])
    model = node_model("NhwcConv", {"X": x, "W": w, "B": b}, ["X"], **attrs)
    (got,) = sonnx_run(model, {"X": x})
    first = [0, x.ndim - 1, *range(1, x.ndim - 1)]
    conv = node_model("Conv", {"X": x.transpose(first), "W": w.transpose(first), "B": b}, ["X"],
                      domain="", **attrs)  # fmt: skip
    (expected,) = ort_run(conv, {"X": x.transpose(first)})
    np.testing.assert_allclose(got, np.moveaxis(expected, 1, -1), rtol=1e-4, atol=1e-5)


def test_nhwc_conv_gradients():
    check_grad(
        lambda x, w, b: NhwcConv(pads=[1, 0, 1, 0], group=2)(x, w, b),
        [RNG.standard_normal(s) for s in ((1, 4, 3, 4), (4, 3, 2, 2), (4,))],
    )


def test_nhwc_conv_names_mismatched_ranks():
    with pytest.raises(BadInputError, match=r"received X \(1, 4, 4, 2\) and W \(3, 2, 2\)"):
        NhwcConv().forward(torch.ones(1, 4, 4, 2), torch.ones(3, 2, 2))


def test_nhwc_conv_exports_as_it_came():
    """Written back as the node it was (onnxruntime cannot run it on the CPU: sonnx runs the
    export instead)."""
    x = Tensor(data=randn(2, 5, 5, 4), requires_grad=False)
    w = Tensor(data=randn(4, 3, 3, 2), requires_grad=False)
    out = NhwcConv(group=2, pads=[1, 1, 1, 1])(x, w)
    model = to_onnx([x], [out])
    nodes = [(n.domain, n.op_type) for n in model.graph.node]
    assert nodes == [("com.microsoft", "NhwcConv")]
    (again,) = sonnx.prepare(model).run([to_numpy(x)])
    np.testing.assert_allclose(to_numpy(again), to_numpy(out), rtol=1e-5, atol=1e-6)
