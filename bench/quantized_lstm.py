"""DynamicQuantizeLSTM (the LSTM ``quantize_dynamic`` writes): sonnx against onnxruntime, with
onnxruntime's own kernel bridged in and with sonnx's torch path.

    python bench/quantized_lstm.py --threads 1               # one node and the CRNN, 1 thread
    python bench/quantized_lstm.py --threads 1 --no-graph    # eager rows only (no compiles)

Two models, each a float model through ``quantize_dynamic`` (7-bit int8 weights,
``reduce_range``):

- one bidirectional LSTM node, ``--steps`` x batch 1 x ``--input``, hidden ``--hidden``;
- the CRNN OCR stand-in of tests/operators/rnn/test_contrib_lstm.py
  (:class:`sonnx.testing.zoo_text.CRNN`: conv stages, a BiLSTM over the columns, a CTC head),
  on one ``48 x --width`` image: ConvInteger, MatMulInteger and DynamicQuantizeLSTM nodes.

Sides: onnxruntime's session; sonnx eagerly with its default kernels (onnxruntime's
DynamicQuantizeLSTM kernel called on torch's memory,
:mod:`sonnx.operators.quantize.ort_lstm`), in graph mode likewise, and eagerly with
``kernels="torch"`` (the recurrence stepped in Python, each product's input rounded to uint8
as onnxruntime does). Every side's result is checked against onnxruntime's. The ratios are each
side's time / onnxruntime's.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import onnx
import torch
from common import (
    add_common_args,
    checked_rows,
    emit,
    machine_facts,
    ort_session,
    pin_threads,
)
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import quantize_dynamic

import sonnx
from sonnx import autograd
from sonnx.testing.zoo_text import CRNN, export_crnn


def quantized(model: onnx.ModelProto, folder: Path, name: str) -> bytes:
    """``model`` through quantize_dynamic with 7-bit weights (onnxruntime's advice on CPUs
    without VNNI, where its u8 x s8 products saturate)."""
    source, target = folder / f"{name}.onnx", folder / f"{name}_dynamic.onnx"
    onnx.save(model, source)
    quantize_dynamic(source, target, reduce_range=True)
    found = onnx.load(target)
    assert "DynamicQuantizeLSTM" in {n.op_type for n in found.graph.node}, name
    return found.SerializeToString()


def lstm_node(width: int, hidden: int) -> onnx.ModelProto:
    """One float bidirectional LSTM node, X ``[steps, 1, width]``."""
    rng = np.random.default_rng(0)
    weights = {
        "W": rng.standard_normal((2, 4 * hidden, width)) * 0.1,
        "R": rng.standard_normal((2, 4 * hidden, hidden)) * 0.1,
        "B": rng.standard_normal((2, 8 * hidden)) * 0.1,
    }
    node = helper.make_node(
        "LSTM", ["X", "W", "R", "B"], ["Y", "Y_h", "Y_c"], hidden_size=hidden,
        direction="bidirectional",
    )  # fmt: skip
    graph = helper.make_graph(
        [node],
        "bilstm",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["steps", 1, width])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in node.output],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40, help="the node's sequence length")
    parser.add_argument("--input", type=int, default=256, help="the node's input size")
    parser.add_argument("--hidden", type=int, default=96, help="the node's hidden size")
    parser.add_argument("--width", type=int, default=320, help="the CRNN image's width")
    parser.add_argument("--no-graph", action="store_true", help="leave out graph mode")
    add_common_args(parser, repeats=31, warmup=3)
    args = parser.parse_args()
    threads = pin_threads(args.threads)
    autograd.training = False
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as folder:
        models = {
            "BiLSTM node": (
                quantized(lstm_node(args.input, args.hidden), Path(folder), "node"),
                np.random.default_rng(1).standard_normal((args.steps, 1, args.input)),
            ),
            "CRNN": (
                quantized(export_crnn(CRNN().eval()), Path(folder), "crnn"),
                np.random.default_rng(2).standard_normal((1, 3, CRNN.HEIGHT, args.width)),
            ),
        }
    rows, notes = [], []
    for case, (data, x) in models.items():
        x = x.astype(np.float32)
        session = ort_session(data, threads)
        feed = {session.get_inputs()[0].name: x}
        reps = {
            "sonnx eager": sonnx.prepare(data),
            "sonnx eager, kernels=torch": sonnx.prepare(data, kernels="torch"),
        }
        if not args.no_graph:
            reps["sonnx graph"] = sonnx.prepare(data, use_graph=True)
        sides = {"onnxruntime": lambda s=session, f=feed: s.run(None, f)[0]}
        sides.update({name: lambda r=rep, x=x: r.run([x])[0].numpy() for name, rep in reps.items()})
        found = checked_rows(sides, f"{case}, {{side}}", args.repeats, args.warmup)
        rows += found[0]
        notes += found[1]
    settings = {
        "node": f"T={args.steps} I={args.input} H={args.hidden} batch 1 bidirectional",
        "crnn": f"48x{args.width} batch 1",
        "repeats": args.repeats,
    }
    facts = machine_facts(threads)
    emit("DynamicQuantizeLSTM", facts, settings, rows, args.json, (), notes)


if __name__ == "__main__":
    main()
