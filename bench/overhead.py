"""Per-node overhead of the eager interpreter: a chain of small ``Add`` nodes.

    python bench/overhead.py                    # 200 nodes on a 1x16 tensor
    python bench/overhead.py --nodes 500 --size 64 --repeats 51 --json

A graph of ``--nodes`` Add nodes, each adding its own small constant, does almost no
arithmetic, so its run time is the cost of interpreting nodes. Three sides run in one process
on the same input: ``SingaRep.run`` (eager), a plain torch Python loop over the same constants
(what any Python interpreter of the graph pays at least) and onnxruntime. The table gives the
time per node of each and the ratios of sonnx to each reference (target: <= 5 us per node).
"""

from __future__ import annotations

import argparse

import numpy as np
import onnx
import torch
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


def add_chain(nodes: int, size: int) -> tuple[onnx.ModelProto, list[np.ndarray]]:
    """``x + c_0 + c_1 + ... + c_{nodes-1}`` as one Add node per constant."""
    rng = np.random.default_rng(0)
    constants = [rng.standard_normal((1, size)).astype(np.float32) for _ in range(nodes)]
    graph = helper.make_graph(
        [
            helper.make_node("Add", [f"h{i}" if i else "x", f"c{i}"], [f"h{i + 1}"], name=f"add{i}")
            for i in range(nodes)
        ],
        "add_chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", size])],
        [helper.make_tensor_value_info(f"h{nodes}", TensorProto.FLOAT, ["batch", size])],
        [numpy_helper.from_array(c, f"c{i}") for i, c in enumerate(constants)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), constants


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--size", type=int, default=16)
    add_common_args(parser, repeats=51, warmup=10)
    args = parser.parse_args()
    threads = pin_threads(args.threads)
    sonnx.tune_process_for_serving()  # as a server would (both sides alike)
    autograd.training = False
    model, constants = add_chain(args.nodes, args.size)
    data = model.SerializeToString()
    x = np.random.default_rng(1).standard_normal((1, args.size)).astype(np.float32)
    rep = sonnx.prepare(data)
    session = ort_session(data, threads)
    torch_constants = [torch.from_numpy(c) for c in constants]

    def torch_loop() -> np.ndarray:
        with torch.no_grad():
            h = torch.from_numpy(x)
            for c in torch_constants:
                h = h + c
            return h.numpy()

    def sonnx_run() -> np.ndarray:
        return rep.run([x])[0].numpy()

    def ort_run() -> np.ndarray:
        return session.run(None, {"x": x})[0]

    expected = torch_loop()
    for fn in (sonnx_run, ort_run):
        np.testing.assert_allclose(fn(), expected, rtol=1e-5, atol=1e-5)
    ours, loop, ort = time_sides([sonnx_run, torch_loop, ort_run], args.repeats, args.warmup)
    per_node = {
        name: timing.median / args.nodes * 1e6
        for name, timing in (("sonnx", ours), ("torch loop", loop), ("onnxruntime", ort))
    }
    rows = [
        row_from(f"{args.nodes} Add nodes", "torch Python loop", (ours, loop)),
        row_from(f"{args.nodes} Add nodes", "onnxruntime", (ours, ort)),
    ]
    notes = [
        "us per node: " + ", ".join(f"{k} {v:.2f}" for k, v in per_node.items()),
        "target: sonnx <= 5 us per node",
    ]
    settings = {"nodes": args.nodes, "size": args.size, "repeats": args.repeats}
    emit("eager interpreter overhead", machine_facts(threads), settings, rows, args.json, (), notes)


if __name__ == "__main__":
    main()
