"""Single-node com.microsoft models run by onnxruntime (CPU) and by sonnx, for the tests of the
products and quantization operators; and an exact reference for the integer products that
onnxruntime gets wrong on some CPUs.

onnxruntime's uint8 x int8 kernels on x86 without VNNI (AVX2, AVX-512 before VNNI) add pairs of
products in int16 (vpmaddubsw), which saturates: 255 * -128 * 2 = -65280 comes out as -32768.
Its quantization docs advise 7-bit weights there (reduce_range). So the tests compare with
onnxruntime on int8 weights of magnitude at most 64 (2 * 255 * 64 = 32640 fits in int16; VNNI
and AMX add in int32), where every x86 kernel is exact, and check the full 8-bit range against
``reference_run``."""

from __future__ import annotations

from collections.abc import Collection

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from onnx.reference.op_run import OpRun

import sonnx
from sonnx.tensor import Tensor, to_numpy

OPSETS = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]


def node_model(
    op_type: str,
    inputs: dict[str, np.ndarray | None],
    graph_inputs: Collection[str],
    outputs: tuple[int, ...] = (onnx.TensorProto.FLOAT,),
    domain: str = "com.microsoft",
    shapes: tuple[tuple[int, ...] | None, ...] | None = None,
    **attrs,
) -> onnx.ModelProto:
    """One ``op_type`` node reading ``inputs`` in order: those named in ``graph_inputs`` are
    graph inputs, the others initializers (None: an absent optional input). ``outputs``: the
    outputs' types, ``shapes`` their shapes (None: not declared)."""
    names = [name if value is not None else "" for name, value in inputs.items()]
    while names and not names[-1]:
        names.pop()
    outs = [f"y{i}" for i in range(len(outputs))]
    node = helper.make_node(op_type, names, outs, domain=domain, **attrs)
    graph = helper.make_graph(
        [node],
        op_type,
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
            for n, a in inputs.items()
            if n in graph_inputs
        ],
        [
            helper.make_tensor_value_info(n, t, shape)
            for n, t, shape in zip(outs, outputs, shapes or [None] * len(outs), strict=True)
        ],
        [
            numpy_helper.from_array(np.asarray(a), n)
            for n, a in inputs.items()
            if a is not None and n not in graph_inputs
        ],
    )
    return helper.make_model(graph, opset_imports=OPSETS, ir_version=10)


def ort_run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """onnxruntime's CPU kernels, without graph rewrites (the nodes run as written)."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return session.run(None, feeds)


def sonnx_run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    tensors = {n: Tensor(data=a, requires_grad=False) for n, a in feeds.items()}
    outs = sonnx.prepare(model).run(tensors)
    return [to_numpy(o) for o in outs]


def both(
    model: onnx.ModelProto, feeds: dict[str, np.ndarray]
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(onnxruntime's outputs, sonnx's outputs)."""
    return ort_run(model, feeds), sonnx_run(model, feeds)


def int8_weights_7_bits(rng: np.random.Generator, *shape: int) -> np.ndarray:
    """int8 weights in [-64, 63]: where onnxruntime's uint8 x int8 products are exact on every
    x86 CPU (the module docstring says why)."""
    return rng.integers(-64, 64, shape).astype(np.int8)


def _dynamic_quantize_linear(x: np.ndarray) -> tuple[np.ndarray, np.float32, np.float32]:
    """ONNX DynamicQuantizeLinear in float32, as onnx.reference computes it: (codes, scale, zero
    point), the codes and zero point as floats."""
    high, low = np.float32(max(0, x.max())), np.float32(min(0, x.min()))
    scale = np.float32(1 if high == low else high - low) / np.float32(255)
    zero_point = np.rint(np.clip(-low / scale, 0, 255))
    return np.clip(np.rint(x / scale) + zero_point, 0, 255), scale, zero_point


def _exact_product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The integer product in int64: exact, whatever the codes."""
    return a.astype(np.int64) @ b.astype(np.int64)


# Named as the operators: onnx.reference matches new_ops by class name.
class DynamicQuantizeMatMul(OpRun):
    """com.microsoft DynamicQuantizeMatMul: A quantized as DynamicQuantizeLinear, the integer
    product exact, then scaled in float32 by ``a_scale * b_scale`` before the bias (onnxruntime's
    order)."""

    op_domain = "com.microsoft"

    def _run(self, a, b, b_scale, b_zero_point=None, bias=None):
        codes, a_scale, a_zero_point = _dynamic_quantize_linear(a)
        b_codes = b if b_zero_point is None else b.astype(np.int64) - b_zero_point
        acc = _exact_product(codes - a_zero_point, b_codes).astype(np.float32)
        y = acc * (a_scale * b_scale.astype(np.float32))
        return (y if bias is None else y + bias,)


class QGemm(OpRun):
    """com.microsoft QGemm: the integer product and int32 C exact, scaled in float32 by
    ``alpha * a_scale * b_scale / y_scale`` and requantized (onnxruntime's order)."""

    op_domain = "com.microsoft"

    def _run(self, a, a_scale, a_zp, b, b_scale, b_zp, c=None, y_scale=None, y_zp=None,
             alpha=1.0, transA=0, transB=0):  # fmt: skip
        a = a.T if transA else a
        b = b.T if transB else b
        acc = _exact_product(a.astype(np.int64) - a_zp, b.astype(np.int64) - b_zp.reshape(-1))
        acc = acc if c is None else acc + c
        scale = np.float32(alpha) * a_scale * b_scale.reshape(-1)
        if y_scale is None:
            return (acc.astype(np.float32) * scale,)
        info = np.iinfo(y_zp.dtype)
        y = np.rint(acc.astype(np.float32) * (scale / y_scale)) + y_zp.astype(np.float32)
        return (np.clip(y, info.min, info.max).astype(y_zp.dtype),)


def reference_run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """onnx.reference's numpy kernels (integer products in int32 or int64: exact), with
    DynamicQuantizeMatMul and QGemm written the same way."""
    evaluator = ReferenceEvaluator(model, new_ops=[DynamicQuantizeMatMul, QGemm])
    return evaluator.run(None, feeds)


def nbits_weight(
    rng: np.random.Generator, bits: int, block: int, k: int, n: int, zero_points: str | None
) -> dict[str, np.ndarray | None]:
    """A MatMulNBits weight [N, K] in blocks of K: random packed codes, scales and zero points
    (None, packed "uint8" or "float")."""
    blocks = -(-k // block)
    b = rng.integers(0, 256, (n, blocks, block * bits // 8)).astype(np.uint8)
    scales = rng.uniform(0.01, 0.1, n * blocks).astype(np.float32)
    if zero_points == "uint8":
        zp = rng.integers(0, 256, n * -(-blocks * bits // 8)).astype(np.uint8)
    elif zero_points == "float":
        zp = rng.uniform(0, 2**bits, n * blocks).astype(np.float32)
    else:
        zp = None
    return {"B": b, "scales": scales, "zero_points": zp}
