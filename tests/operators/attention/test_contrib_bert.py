"""com.microsoft Attention (BERT-style) and MultiHeadAttention against onnxruntime's CPU kernels."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch
from onnx import helper

import sonnx.autograd as autograd
from sonnx import opt
from sonnx.errors import BadInputError, UnsupportedOperatorError
from sonnx.onnx.exporter import to_onnx
from sonnx.operators.attention.contrib_bert import Attention, MultiHeadAttention, QAttention
from sonnx.operators.attention.contrib_decoder import DecoderMaskedMultiHeadAttention
from sonnx.operators.quantize.linear import DynamicQuantizeLinear
from sonnx.tensor import Tensor, to_numpy
from tests.contrib_quant_helpers import int8_weights_7_bits
from tests.helpers import check_grad
from tests.operators.attention.contrib_helpers import RNG, close, contrib_model, randn, run_both

B, S, L, N, H = 2, 3, 4, 2, 8
D = N * H


def lengths(*values: int) -> np.ndarray:
    return np.array(values, np.int32)


def raw_mask(*shape: int) -> np.ndarray:
    mask = (RNG.uniform(size=shape) > 0.3).astype(np.int32)
    mask[..., 0] = 1  # every row keeps a key
    return mask


MHA_CASES = {
    "plain": (lambda: [randn(B, S, D), randn(B, L, D), randn(B, L, D)], 1, {}),
    "bias": (lambda: [randn(B, S, D), randn(B, L, D), randn(B, L, D), randn(3 * D)], 1, {}),
    "lengths_mask": (
        lambda: [randn(B, S, D), randn(B, L, D), randn(B, L, D), randn(3 * D), lengths(4, 2)],
        1,
        {},
    ),
    "raw_mask_filter": (
        lambda: [randn(B, S, D), randn(B, L, D), randn(B, L, D), None, raw_mask(B, L)],
        1,
        {"mask_filter_value": -30.0},
    ),
    "attention_bias_scale": (
        lambda: [randn(B, S, D), randn(B, L, D), randn(B, L, D), None, None, randn(B, N, S, L)],
        1,
        {"scale": 0.2},
    ),
    "split_heads_kv": (lambda: [randn(B, S, D), randn(B, N, L, H), randn(B, N, L, H)], 1, {}),
    "past_causal": (
        lambda: [
            randn(B, S, D),
            randn(B, S, D),
            randn(B, S, D),
            randn(3 * D),
            None,
            randn(1, N, S, 5 + S),
            randn(B, N, 5, H),
            randn(B, N, 5, H),
        ],
        3,
        {"unidirectional": 1},
    ),
    "all_masked_causal": (
        lambda: [randn(B, S, D), randn(B, S, D), randn(B, S, D), None, np.zeros((B, S), np.int32)],
        1,
        {"unidirectional": 1},
    ),
    "self_causal_lengths": (
        lambda: [randn(B, S, D), randn(B, S, D), randn(B, S, D), None, lengths(3, 2)],
        1,
        {"unidirectional": 1},
    ),
}


@pytest.mark.parametrize("case", MHA_CASES)
def test_multi_head_attention_matches_onnxruntime(case: str) -> None:
    make, n_out, attrs = MHA_CASES[case]
    inputs = make()
    model = contrib_model("MultiHeadAttention", inputs, n_out, num_heads=N, **attrs)
    expected, got = run_both(model, inputs)
    for e, g in zip(expected, got, strict=True):
        close(g, e)


def test_multi_head_attention_refuses_causal_cross_attention() -> None:
    op = MultiHeadAttention(num_heads=N, unidirectional=1)
    with pytest.raises(UnsupportedOperatorError, match="cross-attention"):
        op.forward(torch.zeros(B, S, D), torch.zeros(B, L, D), torch.zeros(B, L, D))


X_IN = 12
ATTENTION_CASES = {
    "plain": (lambda: [randn(B, S, X_IN), randn(X_IN, 3 * D), randn(3 * D)], 1, {}),
    "right_padding": (
        lambda: [randn(B, S, X_IN), randn(X_IN, 3 * D), randn(3 * D), lengths(3, 1)],
        1,
        {},
    ),
    "left_padding": (
        lambda: [randn(B, S, X_IN), randn(X_IN, 3 * D), randn(3 * D), lengths(3, 2, 0, 1)],
        1,
        {},
    ),
    "mask_2d": (
        lambda: [randn(B, S, X_IN), randn(X_IN, 3 * D), randn(3 * D), raw_mask(B, S)],
        1,
        {},
    ),
    "mask_3d_scale": (
        lambda: [randn(B, S, X_IN), randn(X_IN, 3 * D), randn(3 * D), raw_mask(B, S, S)],
        1,
        {"scale": 0.3},
    ),
    "causal_bias": (
        lambda: [
            randn(B, S, X_IN),
            randn(X_IN, 3 * D),
            randn(3 * D),
            lengths(3, 1),
            None,
            randn(1, N, S, S),
        ],
        1,
        {"unidirectional": 1},
    ),
    "past_mask_causal": (
        lambda: [
            randn(B, S, X_IN),
            randn(X_IN, 3 * D),
            randn(3 * D),
            raw_mask(B, 5 + S),
            randn(2, B, N, 5, H),
        ],
        2,
        {"unidirectional": 1},
    ),
    "qkv_hidden_sizes": (
        lambda: [randn(B, S, X_IN), randn(X_IN, 2 * D + 8), randn(2 * D + 8)],
        1,
        {"qkv_hidden_sizes": [D, D, 8]},
    ),
    "all_masked_filter": (
        lambda: [randn(B, S, X_IN), randn(X_IN, 3 * D), randn(3 * D), np.zeros((B, S), np.int32)],
        1,
        {"mask_filter_value": -50.0},
    ),
    # The causal mask adds to the padding mask: rows stay weighted toward the past.
    "all_masked_causal": (
        lambda: [randn(B, S, X_IN), randn(X_IN, 3 * D), randn(3 * D), np.zeros((B, S), np.int32)],
        1,
        {"unidirectional": 1},
    ),
}


@pytest.mark.parametrize("case", ATTENTION_CASES)
def test_attention_matches_onnxruntime(case: str) -> None:
    make, n_out, attrs = ATTENTION_CASES[case]
    inputs = make()
    model = contrib_model("Attention", inputs, n_out, num_heads=N, **attrs)
    expected, got = run_both(model, inputs)
    for e, g in zip(expected, got, strict=True):
        close(g, e)


def _attention(x, weights, bias):
    mask = Tensor(data=lengths(3, 2), requires_grad=False)
    return Attention(num_heads=N, unidirectional=1)(x, weights, bias, mask)[0]


def test_attention_gradient_matches_finite_differences() -> None:
    arrays = [randn(B, S, 4), randn(4, 3 * D) * 0.5, randn(3 * D)]
    check_grad(_attention, [a.astype(np.float64) for a in arrays])


def test_attention_sgd_step_lowers_the_loss() -> None:
    x = Tensor(data=randn(B, S, 4), requires_grad=False)
    weights = Tensor(data=randn(4, 3 * D), requires_grad=True, stores_grad=True)
    bias = Tensor(data=randn(3 * D), requires_grad=True, stores_grad=True)
    target = torch.from_numpy(randn(B, S, D))
    sgd = opt.SGD(lr=0.05)
    previous = autograd.training
    autograd.training = True
    try:
        losses = []
        for _ in range(2):
            out = _attention(x, weights, bias)
            loss = autograd.mse_loss(out, Tensor(data=target, requires_grad=False))
            losses.append(float(to_numpy(loss).reshape(-1)[0]))
            for p, g in autograd.backward(loss):
                assert torch.isfinite(g.data).all()
                sgd.update(p, g)
            sgd.step()
    finally:
        autograd.training = previous
    assert losses[1] < losses[0]


def test_attention_names_bad_hidden_sizes() -> None:
    op = Attention(num_heads=N, qkv_hidden_sizes=[D, D, D])
    with pytest.raises(BadInputError, match="hidden sizes"):
        op.forward(torch.zeros(B, S, X_IN), torch.zeros(X_IN, 3 * D + 2))


def test_attention_names_a_bad_mask() -> None:
    op = Attention(num_heads=N)
    with pytest.raises(BadInputError, match="the mask must be"):
        op.forward(torch.zeros(B, S, X_IN), torch.zeros(X_IN, 3 * D), None,
                   torch.ones(B, 7, dtype=torch.int32))  # fmt: skip


def _quantized(weight_dtype: type, per_column: bool, full_range: bool = False) -> list[np.ndarray]:
    """QAttention's input, weight, bias, scales and zero points (in its input order). int8
    weights keep to 7 bits unless ``full_range``: there onnxruntime's uint8 x int8 product is
    exact on every x86 CPU (tests/contrib_quant_helpers.py)."""
    if weight_dtype == np.int8 and not full_range:
        weight = int8_weights_7_bits(RNG, X_IN, 3 * D)
    else:
        info = np.iinfo(weight_dtype)
        weight = RNG.integers(info.min, info.max, (X_IN, 3 * D)).astype(weight_dtype)
    x = RNG.integers(0, 255, (B, S, X_IN)).astype(np.uint8)
    if per_column:
        w_scale = (RNG.uniform(size=3 * D) * 0.02).astype(np.float32)
        w_zero = RNG.integers(-3, 3, 3 * D).astype(weight_dtype)
    else:
        w_scale, w_zero = np.array(0.01, np.float32), np.array(3, weight_dtype)
    return [x, weight, randn(3 * D) * 0.1, np.array(0.02, np.float32), w_scale, None,
            np.array(128, np.uint8), w_zero]  # fmt: skip


def _qattention_arrays() -> list[np.ndarray]:
    """QAttention's inputs with per-row lengths as its mask index."""
    arrays = _quantized(np.int8, False)
    arrays[5] = lengths(3, 2)
    return arrays


@pytest.mark.parametrize(
    "op, arrays",
    [
        (Attention(num_heads=N, unidirectional=1, mask_filter_value=-100.0),
         [randn(B, S, X_IN), randn(X_IN, 3 * D), randn(3 * D), lengths(3, 2)]),
        (MultiHeadAttention(num_heads=N, scale=0.25),
         [randn(B, S, D), randn(B, L, D), randn(B, L, D), randn(3 * D)]),
        (QAttention(num_heads=N),
         _qattention_arrays()),
        (DecoderMaskedMultiHeadAttention(num_heads=N, scale=0.3),
         [randn(B, 1, D), randn(B, N, 5, H), randn(B, N, 5, H)]),
    ],
    ids=["Attention", "MultiHeadAttention", "QAttention", "DecoderMaskedMultiHeadAttention"],
)  # fmt: skip
def test_exports_as_it_came(op, arrays) -> None:
    inputs = [Tensor(data=a, requires_grad=False) for a in arrays]
    result = op(*inputs)
    out = result[0] if isinstance(result, tuple | list) else result  # the attention output
    model = to_onnx(inputs, [out])
    (node,) = model.graph.node
    assert (node.op_type, node.domain) == (op.op_type, "com.microsoft")
    written = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    assert written == pytest.approx(op.attrs)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feed = {i.name: a for i, a in zip(model.graph.input, arrays, strict=True)}
    close(to_numpy(out), session.run(None, feed)[0])


@pytest.mark.parametrize(
    "weight_dtype, per_column, extra, n_out, attrs",
    [
        (np.int8, False, [], 1, {}),
        (np.uint8, False, [], 1, {"unidirectional": 1}),
        (np.int8, True, [], 1, {"scale": 0.3}),
        (np.int8, False, [randn(2, B, N, 4, H)], 2, {}),
    ],
    ids=["int8", "uint8_causal", "per_column", "past"],
)
def test_qattention_matches_onnxruntime(weight_dtype, per_column, extra, n_out, attrs) -> None:
    inputs = _quantized(weight_dtype, per_column) + extra
    inputs[5] = lengths(3, 1)
    model = contrib_model("QAttention", inputs, n_out, num_heads=N, **attrs)
    expected, got = run_both(model, inputs)
    for e, g in zip(expected, got, strict=True):
        close(g, e)


def _dequantized(inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Attention's inputs from QAttention's: the input and weights dequantized in float64."""
    x, w, bias, x_scale, w_scale, mask, x_zero, w_zero = inputs
    x = (x - x_zero.astype(np.float64)) * x_scale
    w = (w - w_zero.astype(np.float64)) * w_scale
    return [x.astype(np.float32), w.astype(np.float32), bias, mask]


@pytest.mark.parametrize("per_column", [False, True])
def test_qattention_full_int8_range_equals_float_attention(per_column) -> None:
    """int8 weights over all 8 bits, whose products with uint8 onnxruntime's QAttention saturates
    in int16 on x86 without VNNI: sonnx equals onnxruntime's float Attention (a float product, no
    saturation) on the dequantized input and weights."""
    inputs = _quantized(np.int8, per_column, full_range=True)
    inputs[5] = lengths(3, 1)
    _, got = run_both(contrib_model("QAttention", inputs, 1, num_heads=N), inputs)
    floats = _dequantized(inputs)
    expected, _ = run_both(contrib_model("Attention", floats, 1, num_heads=N), floats)
    close(got[0], expected[0])


def _float_input_case(per_column: bool, mask: np.ndarray | None) -> list[torch.Tensor | None]:
    """A float input and QAttention's other inputs (weight, bias, weight_scale, mask_index,
    weight_zero_point), as ``forward_float_input`` takes them."""
    _, weight, bias, _, w_scale, _, _, w_zero = _quantized(np.int8, per_column, full_range=True)
    arrays = [randn(B, S, X_IN), weight, bias, w_scale, mask, w_zero]
    return [None if a is None else torch.from_numpy(np.asarray(a)) for a in arrays]


@pytest.mark.parametrize("mask", [None, lengths(3, 1)], ids=["no_mask", "lengths"])
def test_qattention_of_a_float_input_equals_the_two_nodes(mask) -> None:
    """Fused with the DynamicQuantizeLinear before it (what runs in training), QAttention
    computes the nodes' output bit for bit, whether the input needs a gradient or not."""
    x, weight, bias, w_scale, mask_index, w_zero = _float_input_case(True, mask)
    op = QAttention(num_heads=N)
    codes, x_scale, x_zero = DynamicQuantizeLinear().forward(x)
    nodes = op.forward(codes, weight, bias, x_scale, w_scale, mask_index, x_zero, w_zero)[0]
    for needs_grad in (False, True):
        fed = x.clone().requires_grad_(needs_grad)
        fused = op.forward_float_input(fed, weight, bias, w_scale, mask_index, w_zero)
        assert torch.equal(fused, nodes) and fused.requires_grad == needs_grad


@pytest.mark.parametrize(
    "per_column, mask",
    [(False, None), (False, lengths(3, 1)), (True, raw_mask(B, S))],
    ids=["no_mask", "lengths", "per_column_raw_mask"],
)
def test_qattention_float_input_gradients_equal_the_dequantized_surrogate(per_column, mask):
    """The input's gradient passes straight through its rounding, through the dequantized
    weight; the bias gets its own. Both equal central differences (float64) of the surrogate
    that replaces the quantized projection by its linearization at the input: ``qkv(x0) + (x -
    x0) @ dequantize(weight)``, then float attention. That is what the straight-through
    estimator differentiates: the rounding has no derivative, so no difference of the
    quantized node itself could be compared. The analytic gradients are float32."""
    x0, weight, bias, w_scale, mask_index, w_zero = _float_input_case(per_column, mask)
    op = QAttention(num_heads=N)
    x, b = x0.clone().requires_grad_(True), bias.clone().requires_grad_(True)
    out = op.forward_float_input(x, weight, b, w_scale, mask_index, w_zero)
    weighting = torch.from_numpy(np.random.default_rng(1).standard_normal(out.shape))
    grad_x, grad_b = torch.autograd.grad((out.double() * weighting).sum(), [x, b])

    dequantized = (weight.double() - w_zero.double()) * w_scale.double()
    codes, x_scale, x_zero = DynamicQuantizeLinear().forward(x0)
    projected = (codes.double() - x_zero.double()) * x_scale.double() @ dequantized
    offset = projected - x0.double() @ dequantized  # qkv(x0) - x0 @ W, bias aside
    float_attention = Attention(num_heads=N)

    def surrogate(x_: torch.Tensor, b_: torch.Tensor) -> float:
        y = float_attention.forward(x_, dequantized, b_ + offset, mask_index)[0]
        return float((y * weighting).sum())

    for variable, analytic, other in ((x0, grad_x, bias), (bias, grad_b, x0)):
        numeric = torch.zeros(variable.numel(), dtype=torch.float64)
        start = variable.double().reshape(-1)
        for k in range(start.numel()):
            values = []
            for step in (1e-6, -1e-6):
                moved = start.clone()
                moved[k] += step
                args = (moved.reshape(variable.shape), other.double())
                values.append(surrogate(*(args if variable is x0 else args[::-1])))
            numeric[k] = (values[0] - values[1]) / 2e-6
        np.testing.assert_allclose(analytic.reshape(-1).numpy(), numeric.numpy(), rtol=1e-4,
                                   atol=1e-5)  # fmt: skip
