"""Inference: ``SingaRep.run`` against onnxruntime's ``InferenceSession.run`` on the same files.

    python bench/infer.py                           # all models, batch 1 and 16
    python bench/infer.py --models bert --batches 1 8 32 --repeats 21 --json
    python bench/infer.py --models resnet18 --profile 15

The models are exported from ``sonnx.testing.torch_models`` with torch's ONNX exporter (opset
17, BatchNorm folded into Conv as for deployment, dynamic batch): a ResNet-18-style CNN, a
MobileNet-v2-style CNN and a BERT-style encoder. Both sides load the same serialized bytes;
the set-up rows time ``sonnx.prepare`` against creating the onnxruntime session. Each batch
has two sonnx rows: the eager interpreter, and graph mode (``prepare(..., use_graph=True)``:
one ``torch.compile``'d graph per input shape, whose one-off compile time is ``compile_s``).
Each run feeds NumPy arrays and ends with NumPy outputs on both sides, in inference mode
(``sonnx.autograd.training = False``). ``--profile N`` also prints the N most expensive torch
operators of one sonnx run, and how much of the run was spent outside them (Python dispatch).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from common import (
    Row,
    add_common_args,
    emit,
    machine_facts,
    ort_session,
    pin_threads,
    row_from,
    time_once,
    time_sides,
)
from torch.fx.experimental.optimization import fuse

import sonnx
from sonnx import autograd, tensor
from sonnx.testing import torch_models

OPSET = 17
MODELS = ("resnet18", "mobilenetv2", "bert")


@dataclass
class Spec:
    """A model to benchmark: its ONNX bytes, how to make inputs for a batch size, and the
    torch module computing the same function (BatchNorm folded as in the file)."""

    name: str
    onnx_bytes: bytes
    make_inputs: Callable[[int], dict[str, np.ndarray]]
    module: torch.nn.Module


def image_spec(name: str, module: torch.nn.Module, image: int) -> Spec:
    def make(batch: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(batch)
        return {"input": rng.standard_normal((batch, 3, image, image)).astype(np.float32)}

    proto = torch_models.export(module, (torch.from_numpy(make(1)["input"]),), OPSET, ["input"])
    return Spec(f"{name} {image}x{image}", proto.SerializeToString(), make, fuse(module.eval()))


def bert_spec(hidden: int, layers: int, seq: int, vocab: int) -> Spec:
    module = torch_models.TinyBert(
        vocab=vocab, hidden=hidden, heads=hidden // 32, layers=layers, ffn=4 * hidden, max_len=seq
    )

    def make(batch: int) -> dict[str, np.ndarray]:
        ids, mask = torch_models.bert_inputs(batch, seq, vocab)
        return {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}

    example = tuple(torch.from_numpy(a) for a in make(1).values())
    proto = torch_models.export(module, example, OPSET, ["input_ids", "attention_mask"])
    return Spec(f"bert h{hidden} L{layers} seq{seq}", proto.SerializeToString(), make, module)


def build(name: str, args: argparse.Namespace) -> Spec:
    torch.manual_seed(0)
    if name == "resnet18":
        return image_spec("resnet18", torch_models.ResNet18(), args.image)
    if name == "mobilenetv2":
        return image_spec("mobilenetv2", torch_models.MobileNetV2(), args.image)
    return bert_spec(args.bert_hidden, args.bert_layers, args.bert_seq, args.bert_vocab)


def profile_sonnx(run: Callable[[], object], top: int) -> str:
    """The ``top`` torch operators of one run by self time, and the time outside them."""
    from torch.profiler import ProfilerActivity, profile

    run()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        _, seconds = time_once(run)
    events = prof.key_averages()
    in_ops = sum(e.self_cpu_time_total for e in events) / 1e6
    table = events.table(sort_by="self_cpu_time_total", row_limit=top)
    return (
        f"{table}\nwall {seconds * 1e3:.1f} ms under the profiler; torch operators "
        f"{in_ops * 1e3:.1f} ms; outside them (Python) {(seconds - in_ops) * 1e3:.1f} ms"
    )


def bench_model(
    spec: Spec, args: argparse.Namespace, threads: int, rows: list[Row], profiles: list[str]
) -> None:
    """Append the set-up row and one row per batch size for ``spec`` (and its profiles)."""
    rep, prepare_s = time_once(lambda: sonnx.prepare(spec.onnx_bytes))
    graph_rep = sonnx.prepare(spec.onnx_bytes, use_graph=True)
    session, session_s = time_once(lambda: ort_session(spec.onnx_bytes, threads, args.ort_spinning))
    rows.append(Row(f"{spec.name} set-up", prepare_s, session_s, "InferenceSession()"))
    for batch in args.batches:
        feed = spec.make_inputs(batch)
        arrays = list(feed.values())

        def ours(arrays: list[np.ndarray] = arrays) -> list[np.ndarray]:
            return [tensor.to_numpy(t) for t in rep.run(arrays)]

        def graph(arrays: list[np.ndarray] = arrays) -> list[np.ndarray]:
            return [tensor.to_numpy(t) for t in graph_rep.run(arrays)]

        def theirs(feed: dict[str, np.ndarray] = feed) -> list[np.ndarray]:
            return session.run(None, feed)

        def eager(feed: dict[str, np.ndarray] = feed) -> np.ndarray:
            with torch.no_grad():
                return spec.module(*(torch.from_numpy(a) for a in feed.values())).numpy()

        diff = max(float(np.abs(a - b).max()) for a, b in zip(ours(), theirs(), strict=True))
        graph_out, compile_s = time_once(graph)
        graph_diff = max(
            float(np.abs(a - b).max()) for a, b in zip(graph_out, theirs(), strict=True)
        )
        mine, compiled, ort_timing, torch_timing = time_sides(
            [ours, graph, theirs, eager], args.repeats, args.warmup
        )
        for label, timing, max_diff in (("", mine, diff), (" graph", compiled, graph_diff)):
            rows.append(
                row_from(
                    f"{spec.name} batch {batch}{label}",
                    "onnxruntime run()",
                    (timing, ort_timing),
                    max_abs_diff=max_diff,
                    torch_ms=torch_timing.median * 1e3,
                    vs_torch=timing.median / torch_timing.median,
                )
            )
        rows[-1].extra["compile_s"] = compile_s
        if args.profile:
            profiles.append(
                f"-- sonnx {spec.name} batch {batch}\n{profile_sonnx(ours, args.profile)}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 16])
    parser.add_argument("--image", type=int, default=224, help="CNN input side")
    parser.add_argument("--bert-hidden", type=int, default=128)
    parser.add_argument("--bert-layers", type=int, default=4)
    parser.add_argument("--bert-seq", type=int, default=64)
    parser.add_argument("--bert-vocab", type=int, default=1000)
    parser.add_argument(
        "--profile", type=int, default=0, metavar="N", help="print sonnx's top N torch ops"
    )
    parser.add_argument(
        "--ort-spinning",
        action="store_true",
        help="let onnxruntime's threads spin between runs (they then slow the torch side down)",
    )
    add_common_args(parser, repeats=9, warmup=2)
    args = parser.parse_args()
    threads = pin_threads(args.threads)
    autograd.training = False
    rows: list[Row] = []
    profiles: list[str] = []
    for name in args.models:
        bench_model(build(name, args), args, threads, rows, profiles)
    emit(
        "infer: sonnx SingaRep.run vs onnxruntime InferenceSession.run",
        machine_facts(threads),
        {
            "repeats": args.repeats,
            "warmup": args.warmup,
            "opset": OPSET,
            "ort_spinning": args.ort_spinning,
            "batches": args.batches,
            "image": args.image,
            "bert": f"hidden {args.bert_hidden}, {args.bert_layers} layers, seq {args.bert_seq}, "
            f"vocab {args.bert_vocab}",
        },
        rows,
        args.json,
        extra_columns=("torch_ms", "vs_torch", "max_abs_diff", "compile_s"),
        notes=[
            "set-up rows: sonnx.prepare() vs onnxruntime session creation, once, from bytes",
            "max_abs_diff: largest |sonnx - onnxruntime| over the outputs",
            "graph rows: sonnx.prepare(..., use_graph=True), one torch.compile'd graph per input "
            "shape; compile_s: its first run (trace + compile), not in the timings",
            "torch_ms: the source torch.nn module in eager mode under no_grad (BatchNorm folded "
            "into Conv like the file); vs_torch = sonnx / torch eager, i.e. sonnx's own overhead "
            "over its backend",
            *profiles,
        ],
    )


if __name__ == "__main__":
    main()
