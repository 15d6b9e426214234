"""Quantized models: what int8 buys in onnxruntime, sonnx on QDQ graphs, and the cost of QAT.

    python bench/quantize.py                  # batch 1 and 32, one thread
    python bench/quantize.py --batches 1 8 --threads 2

A ResNet-18 (``--model resnet18``, the default, 64x64 inputs) or a MobileNet-v2-style CNN
(``--model mobilenet``, 32x32) from ``sonnx.testing.torch_models``, random weights, is exported
by torch, quantized by ``quantize_static`` (uint8 activations, int8 per-channel
weights, ``reduce_range``: onnxruntime's advice for x86 CPUs without VNNI) and, separately,
trained for a few steps with ``prepare_qat`` and converted. In one run, each at every batch:

- onnxruntime on the QDQ model against onnxruntime on the float model (the int8 export must
  be the faster);
- sonnx on the QDQ model (eager, and graph mode) against onnxruntime on it;
- a QAT training step against a float training step, both in sonnx (batch 32 only).
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from common import (
    add_common_args,
    emit,
    machine_facts,
    ort_session,
    pin_threads,
    row_from,
    time_pair,
    time_sides,
)

import sonnx
from sonnx import autograd, opt, tensor
from sonnx.quantization import convert, prepare_qat, quantize_static
from sonnx.testing import torch_models as tm

OPTIONS = {"activation_type": "uint8", "per_channel": True, "reduce_range": True}


#: model name -> (module, input side)
MODELS = {
    "resnet18": (lambda: tm.ResNet18(num_classes=10), 64),
    "mobilenet": (lambda: tm.MobileNetV2(num_classes=10), 32),
}


def float_model(name: str) -> tuple[bytes, int]:
    """The exported float model and its input side."""
    torch.manual_seed(0)
    build, side = MODELS[name]
    return tm.export(build(), (torch.randn(1, 3, side, side),), 13, ["x"]).SerializeToString(), side


def training_step(rep: sonnx.SingaRep, x: np.ndarray, labels: np.ndarray) -> None:
    sgd = opt.SGD(lr=1e-3)
    autograd.training = True
    try:
        out = rep.run([tensor.from_numpy(x)])[0]
        sgd(autograd.softmax_cross_entropy(out, tensor.from_numpy(labels)))
    finally:
        autograd.training = False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--model", choices=sorted(MODELS), default="resnet18")
    add_common_args(parser, repeats=15, warmup=3)
    args = parser.parse_args()
    threads = pin_threads(args.threads or 1)
    rng = np.random.default_rng(0)
    model, side = float_model(args.model)
    calibration = [
        {"x": rng.standard_normal((8, 3, side, side)).astype(np.float32)} for _ in range(4)
    ]
    qdq = quantize_static(model, calibration, **OPTIONS).SerializeToString()
    float_session, qdq_session = ort_session(model, threads), ort_session(qdq, threads)
    eager, graph = sonnx.prepare(qdq), sonnx.prepare(qdq, use_graph=True)
    rows, notes = [], []
    for batch in args.batches:
        x = rng.standard_normal((batch, 3, side, side)).astype(np.float32)
        ort_qdq = lambda x=x: qdq_session.run(None, {"x": x})[0]  # noqa: E731
        ort_float = lambda x=x: float_session.run(None, {"x": x})[0]  # noqa: E731
        sides = [ort_qdq, ort_float, lambda x=x: eager.run([x])[0], lambda x=x: graph.run([x])[0]]
        expected = ort_qdq()
        for name, fn in (("eager", sides[2]), ("graph", sides[3])):
            found = tensor.to_numpy(fn())
            agree = float((found.argmax(1) == expected.argmax(1)).mean())
            notes.append(
                f"batch {batch}: sonnx {name} predictions equal onnxruntime's: {agree:.3f}"
            )
        timings = time_sides(sides, args.repeats, args.warmup)
        rows.append(
            row_from(
                f"ort QDQ vs ort float, batch {batch}",
                "onnxruntime float",
                (timings[0], timings[1]),
            )
        )
        rows.append(
            row_from(f"sonnx eager QDQ, batch {batch}", "onnxruntime QDQ", (timings[2], timings[0]))
        )
        rows.append(
            row_from(f"sonnx graph QDQ, batch {batch}", "onnxruntime QDQ", (timings[3], timings[0]))
        )
    x = rng.standard_normal((32, 3, side, side)).astype(np.float32)
    labels = rng.integers(0, 10, 32).astype(np.int32)
    qat, plain = prepare_qat(model, calibration, **OPTIONS), sonnx.prepare(model)
    steps = time_pair(
        lambda: training_step(qat, x, labels),
        lambda: training_step(plain, x, labels),
        max(args.repeats // 3, 3),
        1,
    )
    rows.append(row_from("QAT step vs float step, batch 32", "sonnx float step", steps))
    deployed = ort_session(convert(qat).SerializeToString(), threads)
    notes.append(
        "the converted QAT model runs in onnxruntime: output "
        f"{deployed.run(None, {'x': x})[0].shape}"
    )
    settings = {"model": args.model, "batches": args.batches, "repeats": args.repeats, **OPTIONS}
    emit("quantized models", machine_facts(threads), settings, rows, args.json, (), notes)


if __name__ == "__main__":
    main()
