"""com.microsoft products and quantization operators export as they are: a tiny model per op,
built with the operator classes, passes the ONNX checker and onnxruntime matches sonnx at batch
2 and 5 (integer outputs equal)."""

from __future__ import annotations

import numpy as np
import pytest

from sonnx.operators.linalg import contrib_fused as fused
from sonnx.operators.normalization import contrib_quantized as qn
from sonnx.operators.quantize import contrib_integer as ci
from sonnx.operators.quantize import contrib_nbits as cq
from sonnx.operators.quantize import contrib_qlinear as ql
from tests.onnx.export_check import const, export_check, param, rng_inputs

F = np.float32
RNG = np.random.default_rng(3)
U8 = np.uint8


def case(id_: str, build, make, **opts):
    return pytest.param(build, make, opts, id=id_)


def codes(*shape: int, dtype=U8) -> np.ndarray:
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max + 1, shape).astype(dtype)


def scalar(value, dtype=F):
    return const(np.array(value, dtype))


def u8_inputs(*rest: int):
    return rng_inputs((rest, lambda r, s: r.integers(0, 256, s).astype(U8)))


def w(*shape: int):
    return param(RNG.standard_normal(shape).astype(F) * 0.5)


# Weights and constants made once: each case's build runs at every batch size.
_NBITS = (const(codes(6, 2, 8)), const(RNG.uniform(0.01, 0.1, 12).astype(F)), const(codes(6)))
_TABLE = (const(codes(10, 16)), const(RNG.uniform(0.01, 0.1, (10, 2)).astype(F)))
_B8 = const(codes(5, 4, dtype=np.int8))
_Q = (scalar(0.05), scalar(120, U8))
_QY = (scalar(0.08), scalar(128, U8))


_BIAS4 = w(4)
_B_U8 = const(codes(3, 4))
_W64 = w(6, 4)
_W43 = w(4, 3)
_BIAS3 = w(3)
_W_CONV = w(3, 2, 3, 3)
_CODES4 = const(codes(4))
_CODES13 = const(codes(1, 3))


# QEmbedLayerNormalization's word, position, gamma and beta tables with their scales and zero
# points (no segments), in the node's input order.
_QEMBED_TABLES = (const(codes(10, 8)), const(codes(6, 8)), None, const(codes(8)), const(codes(8)))
_QEMBED_SCALES = (scalar(0.02), scalar(0.03), None, scalar(0.01), scalar(0.02))
_QEMBED_ZEROS = (scalar(128, U8), scalar(120, U8), None, scalar(100, U8), scalar(130, U8))


def _qembed(ids):
    op = qn.QEmbedLayerNormalization(epsilon=1e-5)
    return op(ids, None, *_QEMBED_TABLES, None, *_QEMBED_SCALES, *_QEMBED_ZEROS)


def _gather(indices):
    return cq.GatherBlockQuantized(block_size=16, quantize_axis=1)(_TABLE[0], indices, _TABLE[1])


CASES = [
    case(
        "matmul_nbits",
        lambda x: cq.MatMulNBits(K=32, N=6, bits=4, block_size=16)(x, *_NBITS),
        rng_inputs(((3, 32), F)),
        rtol=1e-4,
        atol=1e-5,
    ),
    case(
        "gather_block_quantized",
        _gather,
        rng_inputs(((3,), lambda r, s: r.integers(0, 10, s).astype(np.int64))),
    ),
    case(
        "dynamic_quantize_matmul",
        lambda x: ci.DynamicQuantizeMatMul()(x, _B8, scalar(0.02), None, _BIAS4),
        rng_inputs(((5,), F)),
    ),
    case(
        "matmul_integer_to_float",
        lambda a: ci.MatMulIntegerToFloat()(a, _B_U8, scalar(0.1), scalar(0.02)),
        u8_inputs(3),
    ),
    case(
        "fused_matmul",
        lambda a: fused.FusedMatMul(transB=1, alpha=0.5)(a, _W64),
        rng_inputs(((3, 4), F)),
        rtol=1e-4,
    ),
    case(
        "fused_gemm",
        lambda a: fused.FusedGemm(activation="LeakyRelu", activation_alpha=0.2)(a, _W43, _BIAS3),
        rng_inputs(((4,), F)),
        rtol=1e-4,
    ),
    case(
        "fused_conv",
        lambda x: fused.FusedConv(activation="Relu", pads=[1, 1, 1, 1])(x, _W_CONV, _BIAS3),
        rng_inputs(((2, 5, 5), F)),
        rtol=1e-4,
        atol=1e-5,
    ),
    case(
        "qlinear_add",
        lambda a: ql.QLinearAdd()(a, *_Q, _CODES4, *_Q, *_QY),
        u8_inputs(4),
    ),
    case(
        "qlinear_mul",
        lambda a: ql.QLinearMul()(a, *_Q, _CODES4, *_Q, scalar(2.0), scalar(128, U8)),
        u8_inputs(4),
    ),
    case("qlinear_sigmoid", lambda x: ql.QLinearSigmoid()(x, *_Q, *_QY), u8_inputs(4)),
    case(
        "qlinear_leaky_relu",
        lambda x: ql.QLinearLeakyRelu(alpha=0.1)(x, *_Q, *_QY),
        u8_inputs(4),
    ),
    case(
        "qlinear_softmax",
        lambda x: ql.QLinearSoftmax(opset=13)(x, *_Q, scalar(1 / 256), scalar(0, U8)),
        u8_inputs(4),
    ),
    case(
        "qlinear_average_pool",
        lambda x: ql.QLinearAveragePool(kernel_shape=[2, 2])(x, *_Q, *_QY),
        u8_inputs(2, 4, 4),
    ),
    case(
        "qlinear_global_average_pool",
        lambda x: ql.QLinearGlobalAveragePool()(x, *_Q, *_QY),
        u8_inputs(2, 4, 4),
    ),
    case(
        "qlinear_concat",
        lambda x: ql.QLinearConcat(axis=0)(*_QY, x, *_Q, _CODES13, *_QY),
        u8_inputs(3),
    ),
    case(
        "qlinear_where",
        lambda c, x: ql.QLinearWhere()(c, x, *_Q, _CODES4, *_Q, *_QY),
        rng_inputs(((4,), np.bool_), ((4,), lambda r, s: r.integers(0, 256, s).astype(U8))),
    ),
    case(
        "qgemm",
        lambda a: ql.QGemm()(a, *_Q, _B8, scalar(0.02), scalar(0, np.int8), None, *_QY),
        u8_inputs(5),
    ),
    case(
        "qembed_layer_normalization",
        _qembed,
        rng_inputs(((5,), lambda r, s: r.integers(0, 10, s).astype(np.int32))),
        rtol=1e-4,
        atol=1e-5,
    ),
    case(
        "quantize_dequantize",
        lambda x: ql.DequantizeLinear()(ql.QuantizeLinear()(x, *_Q), *_Q),
        rng_inputs(((4,), F)),
    ),
]


@pytest.mark.parametrize(("build", "make", "opts"), CASES)
def test_contrib_quant_op_exports_and_matches_onnxruntime(build, make, opts) -> None:
    export_check(build, make, **opts)
