"""Every element-wise, cast, shape, activation, linear-algebra and reduction op exports: a tiny
model per op passes the full ONNX checker and onnxruntime matches sonnx at batch 2 and 5."""

from __future__ import annotations

import numpy as np
import pytest

import sonnx.autograd as ag
from tests.onnx.export_check import export_check, param, rng_inputs

F, I32, I64 = np.float32, np.int32, np.int64


def pos(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Positive floats, away from zero (for log, sqrt, reciprocal, division)."""
    return rng.uniform(0.5, 2.0, shape).astype(F)


def above_one(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.uniform(1.1, 3.0, shape).astype(F)


def special(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Floats with some infinities and NaNs (for IsInf / IsNaN)."""
    x = rng.uniform(-1, 1, shape).astype(F)
    x.flat[::3] = np.inf
    x.flat[1::5] = -np.inf
    x.flat[2::7] = np.nan
    return x


def x34(dtype=F):
    return rng_inputs(((3, 4), dtype))


def two34(dtype=F, second=None):
    return rng_inputs(((3, 4), dtype), ((3, 4), second or dtype))


def w(*shape: int, name: str | None = None):
    """A float parameter whose values depend only on its shape, so every build sees the same."""
    return param(np.random.default_rng(list(shape)).standard_normal(shape).astype(F), name)


def wi(low: int, high: int, shape: tuple[int, ...], dtype) -> np.ndarray:
    """Integer weights whose values depend only on the arguments."""
    return np.random.default_rng(list(shape)).integers(low, high, shape).astype(dtype)


def case(id_: str, build, make, **opts):
    return pytest.param(build, make, opts, id=id_)


UNARY = {
    "abs": None,
    "acos": None,
    "acosh": above_one,
    "asin": None,
    "asinh": None,
    "atan": None,
    "atanh": None,
    "ceil": None,
    "cos": None,
    "cosh": None,
    "erf": None,
    "exp": None,
    "floor": None,
    "log": pos,
    "neg": None,
    "negative": None,
    "reciprocal": pos,
    "round": None,
    "sign": None,
    "sin": None,
    "sinh": None,
    "sqrt": pos,
    "tan": None,
    "celu": None,
    "elu": None,
    "gelu": None,
    "hardswish": None,
    "hardsigmoid": None,
    "leakyrelu": None,
    "mish": None,
    "relu": None,
    "selu": None,
    "sigmoid": None,
    "softplus": None,
    "softsign": None,
    "tanh": None,
    "thresholded_relu": None,
    "shrink": None,
}

ELEMENTWISE = [
    *(case(name, getattr(ag, name), rng_inputs(((3, 4), gen or F))) for name, gen in UNARY.items()),
    case("round_halves", ag.round, rng_inputs(((4,), lambda r, s: np.full(s, 2.5, F)))),
    case("isinf", ag.isinf, rng_inputs(((3, 4), special))),
    case("isinf_negative_only", lambda x: ag.isinf(x, 1, 0), rng_inputs(((3, 4), special))),
    case("isnan", ag.isnan, rng_inputs(((3, 4), special))),
    case("not", ag._not, x34(np.bool_)),
    case("bitwise_not", ag.bitwise_not, x34(I32)),
    case("add", ag.add, two34()),
    case("add_param_broadcast", lambda x: x + w(4), x34()),
    case("add_scalar_int", lambda x: x + 2, x34(I64)),
    case("sub", ag.sub, two34()),
    case("rsub_scalar", lambda x: 1.0 - x, x34()),
    case("mul", ag.mul, two34()),
    case("div", ag.div, rng_inputs(((3, 4), F), ((3, 4), pos))),
    case("div_int", ag.div, rng_inputs(((3, 4), I32), ((3, 4), lambda r, s: np.full(s, 2, I32)))),
    case("pow", ag.pow, rng_inputs(((3, 4), pos), ((3, 4), F))),
    case("pow_int_exponent", lambda x: ag.pow(x, np.int64(3)), x34()),
    case("mod_int", ag.mod, rng_inputs(((3, 4), I32), ((3, 4), lambda r, s: np.full(s, 3, I32)))),
    case("fmod", lambda a, b: ag.mod(a, b, fmod=1), rng_inputs(((3, 4), F), ((3, 4), pos))),
    case("and", ag._and, two34(np.bool_)),
    case("or", ag._or, two34(np.bool_)),
    case("xor", ag._xor, two34(np.bool_)),
    case("bitshift", ag.bitshift, two34(np.uint8)),
    case("bitshift_right", lambda a, b: ag.bitshift(a, b, "RIGHT"), two34(np.uint8)),
    case("bitwise_and", ag.bitwise_and, two34(I32)),
    case("bitwise_or", ag.bitwise_or, two34(I32)),
    case("bitwise_xor", ag.bitwise_xor, two34(I32)),
    case("equal", ag.equal, two34(I64)),
    case("greater", ag.greater, two34()),
    case("greater_equal", ag.greater_equal, two34()),
    case("less", ag.less, two34()),
    case("less_equal", ag.less_equal, two34()),
    case("add_bias_rows", lambda x: ag.add_bias(x, w(4), 0), rng_inputs(((4,), F))),
    case("clip", lambda x: ag.clip(x, -0.5, 0.5), x34()),
    case("clip_min_only", lambda x: ag.clip(x, 0.0), x34()),
    case("clip_int", lambda x: ag.clip(x, 0, 1), x34(I64)),
    case("max", ag.max, rng_inputs(((3, 4), F), ((3, 4), F), ((1, 4), F))),
    case("min", ag.min, rng_inputs(((3, 4), F), ((3, 4), F))),
    case("mean", ag.mean, rng_inputs(((3, 4), F), ((3, 4), F), ((3, 4), F))),
    case("sum", ag.sum, rng_inputs(((3, 4), F), ((3, 4), F))),
    case("where", ag.where, rng_inputs(((3, 4), F), ((3, 4), F), ((3, 4), np.bool_))),
    case("where_int", ag.where, rng_inputs(((3,), I64), ((3,), I64), ((3,), np.bool_))),
]


def _cast_float16(x):
    return ag.cast(x, np.float16)


CASTS = [
    case("cast_to_int32", lambda x: ag.cast(x * 3.0, np.int32), x34()),
    case("cast_to_float16", _cast_float16, x34()),
    case("cast_bool_to_float", lambda x: ag.cast(x, "float32"), x34(np.bool_)),
    case("cast_like", ag.cast_like, two34(F, I64)),
    case("bitcast_float_to_int", lambda x: ag.bitcast(x, np.int32), x34()),
]

SHAPES = [
    case("shape", ag.shape, x34()),
    case("size", ag.size, x34()),
    case("constant_of_shape", lambda x: ag.constant_of_shape(ag.shape(x), 2.5), x34()),
    case("eye_like", ag.eye_like, rng_inputs(((5,), F))),
    case("eye_like_k_int", lambda x: ag.eye_like(x, 1, np.int64), rng_inputs(((5,), F))),
    case("range", lambda x: ag.range(0, ag.size(x), 2), x34()),
    case("depth_to_space_dcr", lambda x: ag.depth_to_space(x, 2), rng_inputs(((8, 2, 3), F))),
    case(
        "depth_to_space_crd",
        lambda x: ag.depth_to_space(x, 2, "CRD"),
        rng_inputs(((8, 2, 3), F)),
    ),
    case("space_to_depth", lambda x: ag.space_to_depth(x, 2), rng_inputs(((2, 4, 6), F))),
    case("expand", lambda x: ag.expand(x, [2, 3, 4]), rng_inputs(((1, 3, 1), F))),
    case("flatten", ag.flatten, rng_inputs(((3, 2, 2), F))),
    case("flatten_axis_2", lambda x: ag.flatten(x, 2), rng_inputs(((3, 2, 2), F))),
    case("identity", ag.identity, x34()),
    case("reshape_minus_one_batch", lambda x: ag.reshape(x, [-1, 2, 2]), x34()),
    case("squeeze", lambda x: ag.squeeze(x, 2), rng_inputs(((3, 1, 4), F))),
    case("unsqueeze", lambda x: ag.unsqueeze(x, [1, 3]), x34()),
    case("tile", lambda x: ag.tile(x, [1, 2, 3]), x34()),
    case("transpose", lambda x: ag.transpose(x, [0, 2, 1]), x34()),
    case("concat", lambda a, b: ag.concat([a, b], 1), rng_inputs(((3, 4), F), ((2, 4), F))),
    case("cat_with_param", lambda a: ag.cat([a, a * w(3, 4)], 1), x34()),
    case(
        "center_crop_pad",
        lambda x: ag.center_crop_pad(x, [2, 6], [1, 2]),
        x34(),
    ),
    case("pad_constant", lambda x: ag.pad(x, "constant", [0, 1, 2, 0, 0, 1], 1.5), x34()),
    case("pad_reflect", lambda x: ag.pad(x, "reflect", [0, 1, 2, 0, 1, 1]), x34()),
    case("pad_edge", lambda x: ag.pad(x, "edge", [0, 0, 1, 0, 2, 0]), x34()),
    case(
        "reverse_sequence",
        lambda x: ag.reverse_sequence(x, [2, 1, 2], batch_axis=1, time_axis=0),
        x34(),
    ),
    case("slice", lambda x: ag.slice(x, [1, 0], [3, 4], [1, 2], [1, 2]), x34()),
    case("slice_negative_step", lambda x: ag.slice(x, [-1], [-100], [2], [-1]), x34()),
    case("split", lambda x: ag.split(x, 2, [1, 3]), x34()),
    case("split_equal", lambda x: ag.split(x, 1, None, num_output=3), x34()),
    case("trilu_upper", lambda x: ag.trilu(x, 1), x34()),
    case("trilu_lower", lambda x: ag.trilu(x, -1, False), x34()),
]

ACTIVATIONS = [
    case("hardmax", ag.hardmax, x34()),
    # onnxruntime 1.31 has no kernel for Swish-24: checked with onnx's reference evaluator.
    case("swish", lambda x: ag.swish(x, 0.5), x34(), runtime="reference"),
    case("softmax", lambda x: ag.softmax(x, -1), x34()),
    case("log_softmax", lambda x: ag.log_softmax(x, 1), x34()),
    case("prelu", lambda x: ag.prelu(x, w(4)), x34()),
    case("swiglu", ag.swiglu, two34()),
    case("gelu_tanh", lambda x: ag.gelu(x, "tanh"), x34()),
    case("celu_alpha", lambda x: ag.celu(x, 0.5), x34()),
    case("leakyrelu_slope", lambda x: ag.leakyrelu(x, 0.2), x34()),
]

LINALG = [
    case("matmul", lambda x: ag.matmul(x, w(4, 5)), x34()),
    case("matmul_batched", ag.matmul, rng_inputs(((3, 4), F), ((4, 2), F))),
    case("gemm", lambda x: ag.gemm(x, w(3, 4), w(3), 0.5, 2.0, 0, 1), rng_inputs(((4,), F))),
    case("gemm_no_c", lambda x: ag.gemm(x, w(4, 2)), rng_inputs(((4,), F))),
    case("einsum", lambda x: ag.einsum("bij,jk->bik", x, w(4, 2)), x34()),
    case("cumsum", lambda x: ag.cumsum(x, 2), x34()),
    case("cumsum_exclusive_reverse", lambda x: ag.cumsum(x, 1, 1, 1), x34()),
    case("cumprod", lambda x: ag.cumprod(x, 1), x34()),
    case("det", ag.det, rng_inputs(((3, 3), F)), rtol=1e-4),
    case(
        "matmul_integer",
        lambda a: ag.matmul_integer(a, param(wi(-5, 5, (4, 2), np.int8))),
        rng_inputs(((3, 4), np.uint8)),
    ),
    case(
        "qlinear_matmul",
        lambda a: ag.qlinear_matmul(
            a,
            param(np.float32(0.1)),
            param(np.uint8(2)),
            param(wi(0, 9, (4, 2), np.uint8)),
            param(np.float32(0.2)),
            param(np.uint8(1)),
            param(np.float32(0.3)),
            param(np.uint8(5)),
        ),
        rng_inputs(((3, 4), np.uint8)),
    ),
]


def _reduction(name: str, keep: int):
    return lambda x: getattr(ag, name)(x, [1], keep)


REDUCTIONS = [
    case(f"{name}_keep{keep}", _reduction(name, keep), x34(gen or F))
    for name, gen in {
        "reduce_l1": None,
        "reduce_l2": None,
        "reduce_log_sum": pos,
        "reduce_log_sum_exp": None,
        "reduce_max": None,
        "reduce_mean": None,
        "reduce_min": None,
        "reduce_prod": None,
        "reduce_sum": None,
        "reduce_sum_square": None,
    }.items()
    for keep in (0, 1)
] + [
    case("reduce_sum_all_axes_but_batch", lambda x: ag.reduce_sum(x, [1, 2], 0), x34()),
    case("reduce_max_int", lambda x: ag.reduce_max(x, [2]), x34(I64)),
]

ALL = ELEMENTWISE + CASTS + SHAPES + ACTIVATIONS + LINALG + REDUCTIONS


@pytest.mark.parametrize(("build", "make", "opts"), ALL)
def test_op_exports_and_matches_onnxruntime(build, make, opts) -> None:
    export_check(build, make, **opts)
