"""One 8-bit weight product as ``quantize_dynamic`` and onnxruntime's optimizer leave it: sonnx
against onnxruntime.

    python bench/int8_product.py                      # M=1 and 128, K=N=768, one thread
    python bench/int8_product.py --rows 1 --size 2048

A ``DynamicQuantizeMatMul`` node (float A quantized to uint8 from its own range, int8 weights
with one scale per column, a bias) is run by onnxruntime and by sonnx, eagerly and in graph
mode, with its default kernels (onnxruntime's own kernel called on torch's memory:
:mod:`sonnx.operators.quantize.ort_kernels`) and with ``kernels="torch"`` (the exact int32
sums computed in float64). Weights use 7 bits, where onnxruntime's u8 x s8 kernel does not
saturate on CPUs without VNNI, so every side's result is the exact product's and is checked
against onnxruntime's. The ratios are each side's time / onnxruntime's.
"""

from __future__ import annotations

import argparse

import numpy as np
from common import (
    add_common_args,
    checked_rows,
    emit,
    machine_facts,
    ort_session,
    pin_threads,
)
from onnx import TensorProto, helper, numpy_helper

import sonnx
from sonnx import autograd


def dqmm_model(k: int, n: int, seed: int = 0) -> bytes:
    """A one-node DynamicQuantizeMatMul model of random 7-bit weights, per-column scales and
    a bias."""
    rng = np.random.default_rng(seed)
    weights = [
        numpy_helper.from_array(rng.integers(-64, 64, (k, n)).astype(np.int8), "b"),
        numpy_helper.from_array(rng.uniform(0.001, 0.01, n).astype(np.float32), "b_scale"),
        numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "bias"),
    ]
    node = helper.make_node(
        "DynamicQuantizeMatMul", ["a", "b", "b_scale", "", "bias"], ["y"], domain="com.microsoft"
    )
    graph = helper.make_graph(
        [node],
        "int8_product",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["m", k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["m", n])],
        weights,
    )
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets).SerializeToString()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=768, help="K = N")
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 128], help="M: rows per call")
    add_common_args(parser, repeats=101, warmup=10)
    args = parser.parse_args()
    threads = pin_threads(args.threads)
    autograd.training = False
    data = dqmm_model(args.size, args.size)
    session = ort_session(data, threads)
    reps = {
        "sonnx eager": sonnx.prepare(data),
        "sonnx graph": sonnx.prepare(data, use_graph=True),
        "sonnx eager, kernels=torch": sonnx.prepare(data, kernels="torch"),
        "sonnx graph, kernels=torch": sonnx.prepare(data, use_graph=True, kernels="torch"),
    }
    rows, notes = [], []
    for m in args.rows:
        a = np.random.default_rng(m).standard_normal((m, args.size)).astype(np.float32)
        sides = {"onnxruntime": lambda a=a: session.run(None, {"a": a})[0]}
        for name, rep in reps.items():
            sides[name] = lambda a=a, rep=rep: rep.run([a])[0].numpy()
        found = checked_rows(sides, f"{{side}}, M={m}", args.repeats, args.warmup)
        rows += found[0]
        notes += found[1]
    settings = {"size": args.size, "rows": args.rows, "repeats": args.repeats}
    emit("8-bit product (DynamicQuantizeMatMul)", machine_facts(threads), settings, rows,
         args.json, (), notes)  # fmt: skip


if __name__ == "__main__":
    main()
