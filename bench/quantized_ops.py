"""The 8-bit QOperator-form operators one node at a time: sonnx against onnxruntime.

    python bench/quantized_ops.py                         # every case, one thread
    python bench/quantized_ops.py --cases QGemm QAttention --graph

Each case is a one-node model at a size a quantized CNN or BERT-base layer runs (the products
at K = N = 768 with M = 1 and 128 rows, QLinearConv 3x3 64->64 on 56x56, the elementwise
operators on [1, 64, 56, 56]), run by onnxruntime and by sonnx eagerly with its default
kernels (onnxruntime's own kernel for the ``com.microsoft`` nodes it bridges:
:mod:`sonnx.operators.quantize.ort_qlinear`) and with ``kernels="torch"``; with ``--graph``,
both also in graph mode. This measurement chose which operators are bridged: those
onnxruntime runs clearly faster than torch. Weights are 7-bit (|w| <= 64), where onnxruntime's
u8 x s8 kernels are exact on every x86 CPU, so every side's result can be checked against
onnxruntime's (the notes give the largest difference). The ratios are each side's time /
onnxruntime's.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import numpy as np
from common import (
    add_common_args,
    emit,
    machine_facts,
    ort_session,
    pin_threads,
    row_from,
    time_sides,
)
from onnx import TensorProto, helper, numpy_helper

import sonnx
from sonnx import autograd

RNG = np.random.default_rng(45)
U8, I8, F32 = np.uint8, np.int8, np.float32
#: (model bytes, feeds) of one case.
Case = tuple[bytes, dict[str, np.ndarray]]


def one_node(
    op_type: str,
    inputs: dict[str, np.ndarray | None],
    fed: tuple[str, ...],
    out_type: int,
    domain: str = "com.microsoft",
    **attrs: object,
) -> Case:
    """A model of one ``op_type`` node over ``inputs`` (in slot order; None: absent), those
    named in ``fed`` graph inputs and the others initializers; and its feeds."""
    names = [n if a is not None else "" for n, a in inputs.items()]
    while names and not names[-1]:
        names.pop()
    node = helper.make_node(op_type, names, ["y"], domain=domain, **attrs)
    graph = helper.make_graph(
        [node],
        op_type,
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
            for n, a in inputs.items()
            if n in fed
        ],
        [helper.make_tensor_value_info("y", out_type, None)],
        [
            numpy_helper.from_array(np.asarray(a), n)
            for n, a in inputs.items()
            if a is not None and n not in fed
        ],
    )
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=10)
    return model.SerializeToString(), {n: inputs[n] for n in fed}


def codes(shape: tuple[int, ...], dtype: type = U8) -> np.ndarray:
    """Random 8-bit codes (int8 ones 7-bit: onnxruntime's u8 x s8 kernels stay exact)."""
    if dtype is I8:
        return RNG.integers(-64, 65, shape).astype(I8)
    return RNG.integers(0, 256, shape).astype(U8)


def scalar(value: float, dtype: type = F32) -> np.ndarray:
    return np.array(value, dtype)


def qgemm(m: int, k: int = 768, n: int = 768) -> Case:
    inputs = {
        "A": codes((m, k)), "a_scale": scalar(0.02), "a_zero_point": scalar(128, U8),
        "B": codes((k, n), I8), "b_scale": RNG.uniform(0.001, 0.01, n).astype(F32),
        "b_zero_point": np.zeros(n, I8), "C": RNG.integers(-5000, 5000, n).astype(np.int32),
        "y_scale": scalar(0.5), "y_zero_point": scalar(128, U8),
    }  # fmt: skip
    return one_node("QGemm", inputs, ("A",), TensorProto.UINT8)


def qattention(seq: int, hidden: int = 768, heads: int = 12) -> Case:
    """As ``quantize_dynamic`` writes it: the input, its scale and zero point fed (from a
    DynamicQuantizeLinear), a right-padding mask of lengths."""
    inputs = {
        "input": codes((1, seq, hidden)), "weight": codes((hidden, 3 * hidden), I8),
        "bias": RNG.standard_normal(3 * hidden).astype(F32) * 0.1,
        "input_scale": scalar(0.03), "weight_scale": scalar(0.002),
        "mask_index": np.array([max(1, seq - 3)], np.int32),
        "input_zero_point": scalar(120, U8), "weight_zero_point": scalar(0, I8),
    }  # fmt: skip
    fed = ("input", "input_scale", "mask_index", "input_zero_point")
    return one_node("QAttention", inputs, fed, TensorProto.FLOAT, num_heads=heads)


def unary(op_type: str, shape: tuple[int, ...] = (1, 64, 56, 56), **attrs: object) -> Case:
    inputs = {
        "X": codes(shape), "X_scale": scalar(0.05), "X_zero_point": scalar(128, U8),
        "Y_scale": scalar(0.02), "Y_zero_point": scalar(100, U8),
    }  # fmt: skip
    return one_node(op_type, inputs, ("X",), TensorProto.UINT8, **attrs)


def binary(op_type: str, shape: tuple[int, ...] = (1, 64, 56, 56)) -> Case:
    inputs = {
        "A": codes(shape), "A_scale": scalar(0.05), "A_zero_point": scalar(128, U8),
        "B": codes(shape), "B_scale": scalar(0.04), "B_zero_point": scalar(120, U8),
        "C_scale": scalar(0.08), "C_zero_point": scalar(128, U8),
    }  # fmt: skip
    return one_node(op_type, inputs, ("A", "B"), TensorProto.UINT8)


def concat(shape: tuple[int, ...] = (1, 64, 56, 56)) -> Case:
    inputs = {
        "Y_scale": scalar(0.05), "Y_zero_point": scalar(128, U8),
        "A": codes(shape), "A_scale": scalar(0.04), "A_zero_point": scalar(120, U8),
        "B": codes(shape), "B_scale": scalar(0.06), "B_zero_point": scalar(130, U8),
    }  # fmt: skip
    return one_node("QLinearConcat", inputs, ("A", "B"), TensorProto.UINT8, axis=1)


def qlinear_conv(size: int = 56, channels: int = 64) -> Case:
    inputs = {
        "x": codes((1, channels, size, size)), "x_scale": scalar(0.05),
        "x_zero_point": scalar(128, U8), "w": codes((channels, channels, 3, 3), I8),
        "w_scale": RNG.uniform(0.001, 0.01, channels).astype(F32),
        "w_zero_point": np.zeros(channels, I8), "y_scale": scalar(0.5),
        "y_zero_point": scalar(128, U8),
        "B": RNG.integers(-5000, 5000, channels).astype(np.int32),
    }  # fmt: skip
    return one_node("QLinearConv", inputs, ("x",), TensorProto.UINT8, "", pads=[1, 1, 1, 1])


def qlinear_matmul(m: int, k: int = 768, n: int = 768) -> Case:
    inputs = {
        "a": codes((m, k)), "a_scale": scalar(0.02), "a_zero_point": scalar(128, U8),
        "b": codes((k, n), I8), "b_scale": scalar(0.004), "b_zero_point": scalar(0, I8),
        "y_scale": scalar(0.5), "y_zero_point": scalar(128, U8),
    }  # fmt: skip
    return one_node("QLinearMatMul", inputs, ("a",), TensorProto.UINT8, "")


def matmul_integer(m: int, k: int = 768, n: int = 768) -> Case:
    inputs = {"A": codes((m, k)), "B": codes((k, n), I8), "a_zero_point": scalar(128, U8)}
    return one_node("MatMulInteger", inputs, ("A",), TensorProto.INT32, "")


CASES: dict[str, Callable[[], list[tuple[str, Case]]]] = {
    "QGemm": lambda: [(f"QGemm M={m}", qgemm(m)) for m in (1, 128)],
    "QAttention": lambda: [(f"QAttention S={s}", qattention(s)) for s in (1, 128)],
    "QLinearAdd": lambda: [("QLinearAdd", binary("QLinearAdd"))],
    "QLinearMul": lambda: [("QLinearMul", binary("QLinearMul"))],
    "QLinearSigmoid": lambda: [("QLinearSigmoid", unary("QLinearSigmoid"))],
    "QLinearLeakyRelu": lambda: [("QLinearLeakyRelu", unary("QLinearLeakyRelu", alpha=0.1))],
    "QLinearGlobalAveragePool": lambda: [
        ("QLinearGlobalAveragePool", unary("QLinearGlobalAveragePool"))
    ],
    "QLinearAveragePool": lambda: [
        ("QLinearAveragePool 3x3", unary("QLinearAveragePool", kernel_shape=[3, 3], pads=[1] * 4))
    ],
    "QLinearSoftmax": lambda: [
        ("QLinearSoftmax [64,3136]", unary("QLinearSoftmax", (64, 3136), opset=13))
    ],
    "QLinearConcat": lambda: [("QLinearConcat", concat())],
    "QLinearConv": lambda: [("QLinearConv 3x3 64->64 56x56", qlinear_conv())],
    "QLinearMatMul": lambda: [(f"QLinearMatMul M={m}", qlinear_matmul(m)) for m in (1, 128)],
    "MatMulInteger": lambda: [(f"MatMulInteger M={m}", matmul_integer(m)) for m in (1, 128)],
}


def sides(data: bytes, feeds: dict[str, np.ndarray], threads: int, graph: bool) -> dict:
    """The callables timed for one case, onnxruntime's first."""
    session = ort_session(data, threads)
    reps = {
        "sonnx eager": sonnx.prepare(data),
        "kernels=torch": sonnx.prepare(data, kernels="torch"),
    }
    if graph:
        reps["sonnx graph"] = sonnx.prepare(data, use_graph=True)
        reps["graph, kernels=torch"] = sonnx.prepare(data, use_graph=True, kernels="torch")
    args = list(feeds.values())
    found: dict[str, Callable[[], np.ndarray]] = {
        "onnxruntime": lambda: session.run(None, feeds)[0]
    }
    for name, rep in reps.items():
        found[name] = lambda rep=rep: rep.run(args)[0].numpy()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    parser.add_argument("--graph", action="store_true", help="also sonnx in graph mode (slow)")
    add_common_args(parser, repeats=31, warmup=3)
    args = parser.parse_args()
    threads = pin_threads(args.threads or 1)
    autograd.training = False
    rows, notes = [], []
    for family in args.cases:
        for label, (data, feeds) in CASES[family]():
            fns = sides(data, feeds, threads, args.graph)
            expected = fns["onnxruntime"]()
            for name, fn in list(fns.items())[1:]:
                diff = np.abs(fn().astype(np.float64) - expected.astype(np.float64)).max()
                notes.append(f"{label} {name}: max |difference| from onnxruntime {diff:.3g}")
            measured = time_sides(list(fns.values()), args.repeats, args.warmup)
            timings = dict(zip(fns, measured, strict=True))
            for name in list(fns)[1:]:
                pair = (timings[name], timings["onnxruntime"])
                rows.append(row_from(f"{label}, {name}", "onnxruntime", pair))
    settings = {"cases": args.cases, "graph": args.graph, "repeats": args.repeats}
    emit("8-bit QOperator nodes", machine_facts(threads), settings, rows, args.json, (), notes)


if __name__ == "__main__":
    main()
