"""Element-wise operators: forward against NumPy, gradients against central differences, the
unsigned types torch lacks kernels for, bad inputs, legacy-opset import and export."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import sonnx
from sonnx import autograd
from sonnx.errors import BadInputError, ExportError
from sonnx.onnx.exporter import to_onnx
from sonnx.tensor import Tensor
from tests.helpers import check_grad
from tests.operators.elementwise.helpers import run, t
from tests.operators.shape.helpers import one_node_model

RNG = np.random.default_rng(0)
INT_TYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]


# ---- unary -------------------------------------------------------------------------------------
UNARY = [
    # (function, numpy reference, low, high) — the range keeps inputs inside the domain
    (autograd.exp, np.exp, -2, 2),
    (autograd.log, np.log, 0.5, 3),
    (autograd.sqrt, np.sqrt, 0.5, 3),
    (autograd.reciprocal, np.reciprocal, 0.5, 3),
    (autograd.abs, np.abs, -2, 2),
    (autograd.neg, np.negative, -2, 2),
    (autograd.erf, lambda x: torch.erf(torch.from_numpy(x)).numpy(), -2, 2),
]


@pytest.mark.parametrize(
    ("fn", "ref", "low", "high"), UNARY, ids=lambda v: getattr(v, "__name__", "")
)
def test_unary_forward_and_grad(fn, ref, low, high):
    x = RNG.uniform(low, high, (3, 4))
    np.testing.assert_allclose(run(fn, x.astype(np.float32)), ref(x), rtol=1e-5, atol=1e-6)
    check_grad(fn, [x])


def test_rounding_and_sign():
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, -0.2, 0.0], dtype=np.float32)
    np.testing.assert_array_equal(run(autograd.round, x), np.round(x))  # half to even
    np.testing.assert_array_equal(run(autograd.ceil, x), np.ceil(x))
    np.testing.assert_array_equal(run(autograd.floor, x), np.floor(x))
    np.testing.assert_array_equal(run(autograd.sign, x), np.sign(x))


@pytest.mark.parametrize("dtype", INT_TYPES)
def test_integer_abs_sign_bitwise_not(dtype):
    info = np.iinfo(dtype)
    x = np.array([info.min, info.min + 1, 0, 1, info.max - 1, info.max], dtype=dtype)
    if info.min < 0:
        x = x[1:]  # abs(min) overflows
    np.testing.assert_array_equal(run(autograd.abs, x), np.abs(x))
    np.testing.assert_array_equal(run(autograd.sign, x), np.sign(x))
    np.testing.assert_array_equal(run(autograd.bitwise_not, x), np.invert(x))


def test_isnan_isinf_not():
    x = np.array([1.0, np.nan, np.inf, -np.inf], dtype=np.float32)
    np.testing.assert_array_equal(run(autograd.isnan, x), np.isnan(x))
    np.testing.assert_array_equal(run(autograd.isinf, x), np.isinf(x))
    pos = autograd.isinf(t(x), detect_negative=0).numpy()
    np.testing.assert_array_equal(pos, np.isposinf(x))
    neg = autograd.isinf(t(x), detect_positive=0).numpy()
    np.testing.assert_array_equal(neg, np.isneginf(x))
    b = np.array([True, False])
    np.testing.assert_array_equal(run(autograd._not, b), ~b)


# ---- binary arithmetic ------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", INT_TYPES)
def test_integer_arithmetic_wraps(dtype):
    info = np.iinfo(dtype)
    a = np.array([info.max, info.min, 7, 100, info.max // 3], dtype=dtype)
    b = np.array([1, 1, 3, 7, 5], dtype=dtype)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(run(autograd.add, a, b), a + b)
        np.testing.assert_array_equal(run(autograd.sub, a, b), a - b)
        np.testing.assert_array_equal(run(autograd.mul, a, b), a * b)


@pytest.mark.parametrize("dtype", INT_TYPES)
def test_integer_div_truncates_and_mod(dtype):
    info = np.iinfo(dtype)
    if info.min < 0:
        a = np.array([7, -7, 7, -7, info.max, info.min + 1], dtype=dtype)
        b = np.array([2, 2, -2, -2, 3, 4], dtype=dtype)
    else:
        a = np.array([7, 0, info.max, info.max - 5, 2**7 + 3], dtype=dtype)
        b = np.array([2, 3, 3, info.max, 2**7 + 1], dtype=dtype)
    trunc = np.fix(a.astype(np.float64) / b.astype(np.float64))
    if info.max < 2**53:
        np.testing.assert_array_equal(run(autograd.div, a, b), trunc.astype(dtype))
    np.testing.assert_array_equal(run(autograd.mod, a, b), np.mod(a, b))
    np.testing.assert_array_equal(autograd.mod(t(a), t(b), fmod=1).numpy(), np.fmod(a, b))


# Graph mode runs an integer division eagerly (its divisor check reads the values), and says so.
@pytest.mark.filterwarnings("ignore::sonnx.errors.GraphModeWarning")
@pytest.mark.parametrize("use_graph", [False, True], ids=["eager", "graph"])
@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64])
def test_integer_division_of_the_smallest_value_by_minus_one(dtype, use_graph):
    """The smallest value over -1 overflows, and the CPU's int32 and int64 division traps on it
    (the process died of SIGFPE): the quotient wraps to the smallest value, as NumPy's does,
    and the remainders are 0."""
    low = np.iinfo(dtype).min
    a = np.array([low, low, 7, -7], dtype=dtype)
    b = np.array([-1, 1, -1, -1], dtype=dtype)
    options = {"use_graph": True, "verify": False, "compile_budget": None} if use_graph else {}
    q, r, f = (
        sonnx.prepare(model, **options).run(feeds)[0].numpy()
        for model, feeds in (
            one_node_model("Div", [a, b], 13),
            one_node_model("Mod", [a, b], 13, fmod=0),
            one_node_model("Mod", [a, b], 13, fmod=1),
        )
    )
    np.testing.assert_array_equal(q, np.array([low, low, -7, 7], dtype=dtype))
    np.testing.assert_array_equal(r, np.zeros(4, dtype))
    np.testing.assert_array_equal(f, np.zeros(4, dtype))


def test_uint64_division_with_large_values():
    a = np.array([2**64 - 1, 2**63 + 5, 2**63 + 5, 12345, 2**64 - 2], dtype=np.uint64)
    b = np.array([3, 2**63 + 1, 2**63 + 6, 2**63, 2**64 - 1], dtype=np.uint64)
    np.testing.assert_array_equal(run(autograd.div, a, b), a // b)
    np.testing.assert_array_equal(run(autograd.mod, a, b), a % b)


def test_float_div_and_mod():
    a = np.array([5.5, -5.5, 5.5, -5.5], dtype=np.float32)
    b = np.array([2.0, 2.0, -2.0, -2.0], dtype=np.float32)
    np.testing.assert_allclose(run(autograd.div, a, b), a / b)
    np.testing.assert_allclose(run(autograd.mod, a, b), np.mod(a, b))
    np.testing.assert_allclose(autograd.mod(t(a), t(b), fmod=1).numpy(), np.fmod(a, b))


def test_float_mod_by_infinity_in_graph_mode():
    """A finite dividend over an infinite divisor is the dividend (same signs) or the divisor
    (opposite): inductor's own lowering of ``torch.remainder`` gave NaN, so a compiled Mod
    answered differently from eager mode (the official fmod_0 edge cases, float16 to float64;
    float32 here: a float16 graph takes 45 s to compile on two cores)."""
    dtype = np.float32
    inf = np.inf
    a = np.array([-3, 3, -1, 1, 5.5, -5.5, 0, 7, inf], dtype=dtype)
    b = np.array([inf, inf, -inf, -inf, 2, 2, -2, 0, 2], dtype=dtype)
    model, feeds = one_node_model("Mod", [a, b], 13, fmod=0)
    expected = np.array([inf, 3, -1, -inf, 1.5, 0.5, 0, np.nan, np.nan], dtype=dtype)
    eager = sonnx.prepare(model).run(feeds)[0].numpy()
    rep = sonnx.prepare(model, use_graph=True, verify=False, compile_budget=None)
    graph_result = rep.run(feeds)[0].numpy()
    assert "compiled" in rep.explain()
    np.testing.assert_array_equal(eager, expected)
    np.testing.assert_array_equal(graph_result, expected)


@pytest.mark.parametrize(
    ("xt", "yt"),
    [
        (np.float32, np.float32),
        (np.float32, np.int64),
        (np.float32, np.uint32),
        (np.float32, np.uint64),
        (np.int64, np.float32),
        (np.int32, np.int32),
        (np.int64, np.int64),
        (np.float16, np.float32),
    ],
)
def test_pow_mixed_types(xt, yt):
    x = np.array([1, 2, 3], dtype=xt)
    y = np.array([4, 5, 6], dtype=yt)
    out = run(autograd.pow, x, y)
    assert out.dtype == np.dtype(xt)
    np.testing.assert_allclose(out, np.power(x.astype(np.float64), y).astype(xt), rtol=1e-3)


def test_dunders_record_ops():
    x = t(np.array([1.0, 2.0], dtype=np.float32))
    y = 1 - x * 2 + x / 4
    assert y.creator.op_type == "Add"
    np.testing.assert_allclose(y.numpy(), 1 - np.array([1.0, 2.0]) * 1.75)
    assert (x < 1.5).numpy().tolist() == [True, False]
    assert (x**2).numpy().tolist() == [1.0, 4.0]


@pytest.mark.parametrize("name", ["add", "sub", "mul", "div", "pow"])
def test_binary_grad_with_broadcasting(name):
    fn = getattr(autograd, name)
    a = RNG.uniform(0.5, 2.0, (2, 3, 4))
    b = RNG.uniform(0.5, 2.0, (3, 1))
    check_grad(fn, [a, b])


# ---- comparisons, logic, bitwise, shifts ------------------------------------------------------
@pytest.mark.parametrize("dtype", [*INT_TYPES, np.float16, np.float32, np.float64])
def test_comparisons(dtype):
    big = np.iinfo(dtype).max if np.issubdtype(dtype, np.integer) else 1000
    a = np.array([[0, 1, big], [3, big, 2]], dtype=dtype)
    b = np.array([1, big, 2], dtype=dtype)
    np.testing.assert_array_equal(run(autograd.less, a, b), a < b)
    np.testing.assert_array_equal(run(autograd.less_equal, a, b), a <= b)
    np.testing.assert_array_equal(run(autograd.greater, a, b), a > b)
    np.testing.assert_array_equal(run(autograd.greater_equal, a, b), a >= b)
    np.testing.assert_array_equal(run(autograd.equal, a, b), a == b)


def test_logical_and_bitwise():
    p = np.array([[True, False], [True, True]])
    q = np.array([True, False])
    np.testing.assert_array_equal(run(autograd._and, p, q), p & q)
    np.testing.assert_array_equal(run(autograd._or, p, q), p | q)
    np.testing.assert_array_equal(run(autograd._xor, p, q), p ^ q)
    for dtype in (np.int16, np.uint64):
        a = np.array([0b1100, 0b1010, 7], dtype=dtype)
        b = np.array([0b1010], dtype=dtype)
        np.testing.assert_array_equal(run(autograd.bitwise_and, a, b), a & b)
        np.testing.assert_array_equal(run(autograd.bitwise_or, a, b), a | b)
        np.testing.assert_array_equal(run(autograd.bitwise_xor, a, b), a ^ b)


@pytest.mark.parametrize("dtype", INT_TYPES)
def test_bitshift(dtype):
    bits = np.iinfo(dtype).bits
    signed = np.iinfo(dtype).min < 0
    x = np.array([1, 5, np.iinfo(dtype).max, -8 if signed else 8, 3, -8 if signed else 8], dtype)
    y = np.array([1, 2, 1, 1, bits, bits + 3], dtype=dtype)
    left = autograd.bitshift(t(x), t(y), "LEFT").numpy()
    right = autograd.bitshift(t(x), t(y), "RIGHT").numpy()
    np.testing.assert_array_equal(left[:4], np.left_shift(x[:4], y[:4]))
    np.testing.assert_array_equal(right[:4], np.right_shift(x[:4], y[:4]))
    np.testing.assert_array_equal(left[4:], [0, 0])  # shifts >= the width give the fill
    np.testing.assert_array_equal(right[4:], [0, -1 if signed else 0])


def test_bitshift_uint64_right_is_logical_and_negative_shift_fills():
    x = np.array([2**64 - 1, 2**63], dtype=np.uint64)
    y = np.array([4, 63], dtype=np.uint64)
    np.testing.assert_array_equal(run(lambda a, b: autograd.bitshift(a, b, "RIGHT"), x, y), x >> y)
    neg = autograd.bitshift(t(np.array([-4, 4], np.int8)), t(np.array([-1, -1], np.int8)), "RIGHT")
    np.testing.assert_array_equal(neg.numpy(), [-1, 0])


# ---- variadic, Where, Clip, add_bias ----------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.uint16, np.uint32, np.uint64])
def test_variadic_max_min_sum(dtype):
    hi = min(np.iinfo(dtype).max if np.issubdtype(dtype, np.integer) else 100, 2**62) // 4
    a = RNG.integers(0, hi, (2, 3)).astype(dtype)
    b = RNG.integers(0, hi, (3,)).astype(dtype)
    c = RNG.integers(0, hi, (1, 1)).astype(dtype)
    if dtype == np.uint64:
        a[0, 0] = np.uint64(2**64 - 1)  # above int64's range: order must stay unsigned
    np.testing.assert_array_equal(run(autograd.max, a, b, c), np.maximum(np.maximum(a, b), c))
    np.testing.assert_array_equal(run(autograd.min, a, b, c), np.minimum(np.minimum(a, b), c))
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(run(autograd.sum, a, b, c), a + b + c)
    np.testing.assert_array_equal(run(autograd.max, a), a)


def test_variadic_grads():
    a, b, c = RNG.normal(size=(2, 3)), RNG.normal(size=(3,)), RNG.normal(size=(2, 1))
    for fn in (autograd.max, autograd.min, autograd.sum, autograd.mean):
        check_grad(fn, [a, b, c])
    np.testing.assert_allclose(run(autograd.mean, a, b, c), (a + b + c) / 3)


def test_where_uses_singa_argument_order_and_grad():
    cond = np.array([[True, False, True]])
    x, y = RNG.normal(size=(2, 3)), RNG.normal(size=(3,))
    np.testing.assert_array_equal(autograd.where(t(x), t(y), t(cond)).numpy(), np.where(cond, x, y))
    check_grad(lambda a, b: autograd.where(a, b, t(cond)), [x, y])
    u = np.array([2**64 - 1, 1], dtype=np.uint64)
    v = np.array([3, 2**63], dtype=np.uint64)
    picked = autograd.where(t(u), t(v), t(np.array([True, False]))).numpy()
    np.testing.assert_array_equal(picked, [2**64 - 1, 2**63])


def test_clip():
    x = np.array([-3.0, -1.0, 0.5, 2.0, 9.0], dtype=np.float32)
    np.testing.assert_array_equal(autograd.clip(t(x), -1.5, 1.5).numpy(), np.clip(x, -1.5, 1.5))
    np.testing.assert_array_equal(autograd.clip(t(x), None, 1.0).numpy(), np.minimum(x, 1.0))
    np.testing.assert_array_equal(autograd.clip(t(x)).numpy(), x)
    np.testing.assert_array_equal(autograd.clip(t(x), 2.0, 1.0).numpy(), np.full(5, 1.0))
    u = np.array([0, 5, 2**32 - 1], dtype=np.uint32)
    np.testing.assert_array_equal(autograd.clip(t(u), 1, 2**32 - 2).numpy(), [1, 5, 2**32 - 2])
    w = np.array([0, 5, 2**64 - 1], dtype=np.uint64)
    clipped = autograd.clip(t(w), t(np.uint64(3)), t(np.uint64(2**63))).numpy()
    np.testing.assert_array_equal(clipped, np.array([3, 5, 2**63], dtype=np.uint64))
    # One-element bounds of shape (1,) are accepted as scalars.
    one = autograd.clip(t(x), t(np.array([0.0], np.float32)), t(np.array([1.0], np.float32)))
    assert one.shape == x.shape


def test_clip_grad():
    x = np.array([-3.0, -1.0, 0.5, 2.0, 9.0])
    check_grad(lambda a: autograd.clip(a, -1.5, 2.5), [x])
    check_grad(lambda a, lo, hi: autograd.clip(a, lo, hi), [x, np.array(-1.5), np.array(2.5)])


def test_add_bias():
    x = RNG.normal(size=(2, 3)).astype(np.float32)
    rows = RNG.normal(size=(3,)).astype(np.float32)
    cols = RNG.normal(size=(2,)).astype(np.float32)
    out0 = autograd.add_bias(t(x), t(rows), axis=0)
    assert out0.creator.op_type == "Add"
    np.testing.assert_allclose(out0.numpy(), x + rows)
    np.testing.assert_allclose(autograd.add_bias(t(x), t(cols), axis=1).numpy(), x + cols[:, None])
    check_grad(
        lambda a, b: autograd.add_bias(a, b, axis=1),
        [x.astype(np.float64), cols.astype(np.float64)],
    )
    with pytest.raises(BadInputError, match="add_bias: b must have 3 values"):
        autograd.add_bias(t(x), t(cols), axis=0)


# ---- bad inputs -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: autograd.add(t(np.ones(2, np.float32)), t(np.ones(2))),
            r"Add: input B must have the element type of input A \(float32\), received float64",
        ),
        (lambda: autograd.mul(t(np.ones((2, 3))), t(np.ones(4))), "Mul: inputs must be broadcast"),
        (
            lambda: autograd.exp(t(np.ones(2, np.int64))),
            r"Exp: input input must be a floating.*\), received int64$",
        ),
        (lambda: autograd.div(t(np.ones(2, np.int32)), t(np.zeros(2, np.int32))), "by zero"),
        (lambda: autograd.mod(t(np.ones(2, np.int32)), t(np.zeros(2, np.int32))), "by zero"),
        (lambda: autograd._not(t(np.ones(2))), "Not: input X must be a bool tensor.*float64$"),
        (lambda: autograd._and(t(np.ones(2)), t(np.ones(2))), "And: input A must be a bool"),
        (lambda: autograd.neg(t(np.ones(2, np.uint8))), "Neg: input X must be a signed"),
        (lambda: autograd.bitwise_and(t(np.ones(2)), t(np.ones(2))), "must be an integer"),
        (lambda: autograd.where(t(np.ones(2)), t(np.ones(2)), t(np.ones(2))), "condition must"),
        (lambda: autograd.clip(t(np.ones(3)), t(np.zeros(2)), None), "Clip: input min must be"),
        (lambda: autograd.mean(t(np.ones(2, np.int32))), "Mean: input data_0 must be a floating"),
        (lambda: autograd.max(), "Max: expected at least one input"),
        (lambda: autograd.pow(t(np.ones(2, np.int32)), t(np.array([-1, 2], np.int32))), "Pow"),
        (lambda: autograd.bitshift(t(np.ones(2, np.int8)), t(np.ones(2, np.int8)), "UP"), "LEFT"),
    ],
)
def test_bad_inputs(call, message):
    with pytest.raises(BadInputError, match=message):
        call()


# ---- import of legacy opsets and export -------------------------------------------------------
def _model(node: onnx.NodeProto, inputs, outputs, opset: int) -> onnx.ModelProto:
    graph = helper.make_graph([node], "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _vi(name: str, elem: int, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def test_import_opset6_add_with_broadcast_axis():
    node = helper.make_node("Add", ["a", "b"], ["y"], broadcast=1, axis=1)
    f = TensorProto.FLOAT
    model = _model(node, [_vi("a", f, [2, 3, 4]), _vi("b", f, [3])], [_vi("y", f, None)], 6)
    a = RNG.normal(size=(2, 3, 4)).astype(np.float32)
    b = RNG.normal(size=(3,)).astype(np.float32)
    (y,) = sonnx.prepare(model).run({"a": a, "b": b})
    np.testing.assert_allclose(y.numpy(), a + b[:, None])


def test_import_clip6_and_abs1():
    x = np.array([-3.0, 0.5, 4.0], dtype=np.float32)
    f = TensorProto.FLOAT
    clip = helper.make_node("Clip", ["x"], ["y"], min=-1.0, max=2.0)
    model = _model(clip, [_vi("x", f, [3])], [_vi("y", f, None)], 6)
    (y,) = sonnx.prepare(model).run({"x": x})
    np.testing.assert_array_equal(y.numpy(), np.clip(x, -1.0, 2.0))
    absolute = helper.make_node("Abs", ["x"], ["y"], consumed_inputs=[0])
    model = _model(absolute, [_vi("x", f, [3])], [_vi("y", f, None)], 1)
    (y,) = sonnx.prepare(model).run({"x": x})
    np.testing.assert_array_equal(y.numpy(), np.abs(x))


def _roundtrip(inputs: list[Tensor], output: Tensor, opset: int) -> list[np.ndarray]:
    model = to_onnx(inputs, [output], opset=opset)
    feeds = {i.name: x.numpy() for i, x in zip(model.graph.input, inputs, strict=True)}
    return ReferenceEvaluator(model).run(None, feeds)


def test_export_roundtrip():
    a = t(RNG.normal(size=(2, 3)).astype(np.float32))
    b = t(RNG.uniform(1, 2, size=(3,)).astype(np.float32))
    y = autograd.clip(autograd.where(a, b, a > b) * autograd.exp(a) - autograd.max(a, b), -1.0, 1.0)
    (out,) = _roundtrip([a, b], y, opset=17)
    np.testing.assert_allclose(out, y.numpy(), rtol=1e-5)


def test_export_pow_mixed_types_before_opset_12_casts_exponent():
    x = t(np.array([1.0, 2.0, 3.0], np.float32))
    e = t(np.array([2, 3, 1], np.int64))
    y = autograd.pow(x, e)
    model = to_onnx([x, e], [y], opset=11)
    assert [n.op_type for n in model.graph.node] == ["Cast", "Pow"]
    (out,) = _roundtrip([x, e], y, opset=11)
    np.testing.assert_allclose(out, [1.0, 8.0, 3.0])


def test_export_integer_clip_before_opset_12_fails():
    x = t(np.array([1, 5], np.int32))
    with pytest.raises(ExportError, match=r"Clip of int32 needs opset 12"):
        to_onnx([x], [autograd.clip(x, 0, 3)], opset=11)
