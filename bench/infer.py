"""Inference: ``SingaRep.run`` against onnxruntime's ``InferenceSession.run`` on the same files.

    python bench/infer.py                           # the three original models, batch 1 and 16
    python bench/infer.py --models bert --batches 1 8 32 --repeats 21 --json
    python bench/infer.py --models resnet18 --profile 15
    python bench/infer.py --models yolov8 dbnet --det-sizes 320 480x640   # zoo: batch 1 and 8
    python bench/infer.py --models ppocr-det --det-sizes 320x480 --batches 1

The models are exported from ``sonnx.testing.torch_models`` with torch's ONNX exporter (opset
17, BatchNorm folded into Conv as for deployment, dynamic batch): a ResNet-18-style CNN, a
MobileNet-v2-style CNN and a BERT-style encoder, the latter also as onnxruntime's transformers
optimizer rewrites it (``bert-optimized``: com.microsoft Attention, SkipLayerNormalization,
EmbedLayerNormalization and BiasGelu, as optimized encoders are published). The zoo stand-ins
(``sonnx.testing.zoo_*``, random weights) imitate deployed files: ResNet-50 and
MobileNet-v3-Large at ``--image``, a YOLOv8n detector and a DBNet text detector at each of
``--det-sizes`` (dynamic H x W, the YOLO anchor grid computed in the graph), a PP-OCR text
detector as paddle2onnx writes it at the same sizes (opset 11, BatchNormalization kept, the
statistics of a trained network: ``sonnx.testing.zoo_ocr``), a CRNN recogniser at 48 x each of
``--rec-widths``, a BERT-style encoder (hidden 256, 4 layers, BERT-base's
vocabulary; hidden 768 would make the run too long) with int8 weights behind DequantizeLinear /
Cast at each of ``--qbert-seqs``, and a streaming VAD (an ``If`` on the sample rate, a stateful
LSTM) on 512-sample chunks at 16 and 8 kHz. Both sides load the same serialized bytes; the
set-up rows time ``sonnx.prepare`` against creating the onnxruntime session. Each batch has two
sonnx rows: the eager interpreter, and graph mode (``prepare(..., use_graph=True)``: graphs
traced with symbolic sizes and compiled by inductor, a new one only for a shape the ones before
do not serve; ``compile_s`` is the first run at each shape, compiling or not; ``eager_max`` and
``eager_mean``, graph mode's largest and mean absolute difference from the eager run on the same
inputs, show what the compile changed in the results). Each run feeds
NumPy arrays and ends with NumPy outputs on both sides, in inference mode
(``sonnx.autograd.training = False``). ``--profile N`` also prints the N most expensive torch
operators of one sonnx run, and how much of the run was spent outside them (Python dispatch).
``--models llm-int4`` times the prompt pass of an int4 llama that onnxruntime-genai's builder
writes (prefill, an empty cache, ``--llm-prompts`` tokens). ``--torch-compiled`` also times the
source torch module compiled the way torch runs best on the CPU for one shape
(``torch.compile``, inductor with weights frozen and prepacked, a graph per shape): how far
graph mode is from what torch's kernels can do at all. ``--torch-onednn-graph`` times the source
module traced to TorchScript per shape, frozen, and run through oneDNN Graph (torch's LLGA
fuser, ``torch.jit.enable_onednn_fusion``), which keeps compiled oneDNN partitions between calls
where eager torch and inductor's graphs set up each convolution call anew: what a backend built
on it could reach."""

from __future__ import annotations

import argparse
import functools
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
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
from sonnx.runtime.graph_mode import GraphRunner
from sonnx.testing import torch_models, zoo_audio, zoo_ocr, zoo_text, zoo_vision

OPSET = 17
MODELS = ("resnet18", "mobilenetv2", "bert", "bert-optimized")
ZOO = (
    "resnet50",
    "mobilenetv3",
    "yolov8",
    "dbnet",
    "ppocr-det",
    "crnn",
    "bert-int8",
    "bert-dyn8",
    "vad",
)
LLMS = ("llm-int4",)
Feeds = dict[str, np.ndarray]


@dataclass
class Spec:
    """A model to benchmark: its ONNX bytes, how to make inputs for a batch size (for each
    variant of its other dynamic dims, by label), and the torch module computing the same
    function (BatchNorm folded as in the file), if there is one."""

    name: str
    onnx_bytes: bytes
    variants: dict[str, Callable[[int], Feeds]]
    module: Callable[..., object] | None
    batches: list[int]


def _folded(module: torch.nn.Module) -> torch.nn.Module:
    """``module`` with BatchNorm folded into Conv; a module torch.fx cannot trace symbolically
    (shape-dependent code, as the YOLO head) is kept as it is, BatchNorm and all."""
    try:
        return fuse(module.eval())
    except torch.fx.proxy.TraceError:
        return module.eval()


def _dynamically_quantized(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` through onnxruntime's ``quantize_dynamic`` (int8 weights; reduce_range, as
    onnxruntime advises where its u8s8 kernels saturate: AVX2 without VNNI)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory() as folder:
        source, target = Path(folder) / "float.onnx", Path(folder) / "int8.onnx"
        onnx.save(model, source)
        quantize_dynamic(source, target, weight_type=QuantType.QInt8, reduce_range=True)
        return onnx.load(target)


def _random_images(batch: int, h: int, w: int, name: str = "images") -> Feeds:
    rng = np.random.default_rng(batch)
    return {name: rng.standard_normal((batch, 3, h, w)).astype(np.float32)}


def image_spec(name: str, module: torch.nn.Module, image: int, batches: list[int]) -> Spec:
    def make(batch: int) -> Feeds:
        return _random_images(batch, image, image, "input")

    proto = torch_models.export(module, (torch.from_numpy(make(1)["input"]),), OPSET, ["input"])
    variants = {f"{image}x{image}": make}
    return Spec(name, proto.SerializeToString(), variants, fuse(module.eval()), batches)


def parse_size(text: str) -> tuple[int, int]:
    """``"480x640"`` -> (480, 640); ``"320"`` -> (320, 320)."""
    h, _, w = text.partition("x")
    return int(h), int(w or h)


def zoo_spec(name: str, args: argparse.Namespace, batches: list[int]) -> Spec:
    """One of the ``sonnx.testing.zoo_*`` stand-ins at the sizes the flags ask for."""
    if name in ("resnet50", "mobilenetv3"):
        module = zoo_vision.ResNet50() if name == "resnet50" else zoo_vision.MobileNetV3()
        model = zoo_vision.export_image_model(module, OPSET, size=args.image)
        return _sized(name, model, module, [(args.image, args.image)], batches)
    if name in ("yolov8", "dbnet"):
        module = zoo_vision.YoloV8() if name == "yolov8" else zoo_vision.DBNet()
        model = zoo_vision.export_image_model(module, OPSET, True, name == "dbnet")
        return _sized(name, model, module, [parse_size(s) for s in args.det_sizes], batches)
    if name == "ppocr-det":
        module = zoo_ocr.trained_statistics(zoo_ocr.PPOCRDetector())
        model = zoo_ocr.export_ppocr_detector(module)
        sizes = [parse_size(s) for s in args.det_sizes]
        return _sized(name, model, module, sizes, batches, "x")
    if name == "crnn":
        module = zoo_text.CRNN()
        model = zoo_text.export_crnn(module, OPSET)
        return _sized(name, model, module, [(48, w) for w in args.rec_widths], batches, "image")
    if name in ("bert-int8", "bert-dyn8"):
        module = zoo_text.BertEncoder()
        vocab = module.tokens.num_embeddings
        variants = {
            f"seq{s}": functools.partial(_text_feeds, seq=s, vocab=vocab) for s in args.qbert_seqs
        }
        if name == "bert-int8":  # int8 weights behind DequantizeLinear
            model = zoo_text.export_bert(module, OPSET)
        else:  # onnxruntime's quantize_dynamic: MatMulInteger on int8 activations and weights
            model = _dynamically_quantized(zoo_text.export_bert(module, OPSET, quantize=False))
        # No torch counterpart: the float module does not compute the int8 model's function.
        return Spec(name, model.SerializeToString(), variants, None, batches)
    module = zoo_audio.StreamingVAD().eval()
    variants = {
        f"512@{sr // 1000}kHz": functools.partial(_vad_feeds, sr=sr, hidden=module.hidden)
        for sr in zoo_audio.RATES
    }
    model = zoo_audio.export_vad(module, OPSET)
    return Spec("vad", model.SerializeToString(), variants, module, batches)


def _sized(
    name: str,
    model: onnx.ModelProto,
    module: torch.nn.Module,
    sizes: list[tuple[int, int]],
    batches: list[int],
    input_name: str = "images",
) -> Spec:
    variants = {
        f"{h}x{w}": functools.partial(_random_images, h=h, w=w, name=input_name) for h, w in sizes
    }
    return Spec(name, model.SerializeToString(), variants, _folded(module), batches)


def _text_feeds(batch: int, seq: int, vocab: int) -> Feeds:
    return zoo_text.text_inputs(batch, seq, vocab, seed=batch)


def _vad_feeds(batch: int, sr: int, hidden: int) -> Feeds:
    return zoo_audio.vad_inputs(batch, sr, hidden, seed=batch)


def bert_spec(hidden: int, layers: int, seq: int, vocab: int, batches: list[int]) -> Spec:
    module = torch_models.TinyBert(
        vocab=vocab, hidden=hidden, heads=hidden // 32, layers=layers, ffn=4 * hidden, max_len=seq
    )

    def make(batch: int) -> Feeds:
        ids, mask = torch_models.bert_inputs(batch, seq, vocab)
        return {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}

    example = tuple(torch.from_numpy(a) for a in make(1).values())
    proto = torch_models.export(module, example, OPSET, ["input_ids", "attention_mask"])
    name = f"bert h{hidden} L{layers}"
    return Spec(name, proto.SerializeToString(), {f"seq{seq}": make}, module, batches)


def optimized_bert_spec(spec: Spec, hidden: int) -> Spec:
    """``spec``'s encoder as onnxruntime's transformers optimizer rewrites it for its own
    fused kernels (com.microsoft EmbedLayerNormalization, Attention, SkipLayerNormalization,
    BiasGelu): the form an optimized BERT is downloaded in."""
    from onnxruntime.transformers.optimizer import optimize_model

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bert.onnx"
        path.write_bytes(spec.onnx_bytes)
        optimized = optimize_model(
            str(path), model_type="bert", num_heads=hidden // 32, hidden_size=hidden, opt_level=0
        )
    proto = optimized.model.SerializeToString()
    return Spec(spec.name + " optimized", proto, spec.variants, spec.module, spec.batches)


def llm_spec(batches: list[int], prompts: list[int]) -> Spec:
    """The prompt pass (prefill, an empty KV cache) of a random llama (hidden 512, 4 layers,
    8 heads over 4 KV heads, MLP 1408, 32000 tokens; about 45M parameters) as
    onnxruntime-genai's model builder writes it in int4 for the CPU (MatMulNBits at accuracy
    level 4, GroupQueryAttention, the RMS norms), built by ``bench/generate.py``'s builder."""
    from generate import build_models

    shape = argparse.Namespace(
        vocab=32000, hidden=512, intermediate=1408, layers=4, heads=8, kv_heads=4,
        precisions=["int4"],
    )  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        model = onnx.load(str(build_models(Path(tmp), shape)["int4"] / "model.onnx"))
    pasts = [i.name for i in model.graph.input if i.name.startswith("past_key_values")]
    head_size = shape.hidden // shape.heads

    def make(batch: int, prompt: int) -> Feeds:
        rng = np.random.default_rng(batch)
        feeds = {
            "input_ids": rng.integers(3, shape.vocab, (batch, prompt)).astype(np.int64),
            "attention_mask": np.ones((batch, prompt), np.int64),
        }
        for name in pasts:
            feeds[name] = np.zeros((batch, shape.kv_heads, 0, head_size), np.float32)
        return feeds

    variants = {f"prompt{p}": functools.partial(make, prompt=p) for p in prompts}
    return Spec("llm-int4", model.SerializeToString(), variants, None, batches)


def build(name: str, args: argparse.Namespace) -> Spec:
    torch.manual_seed(0)
    batches = args.batches or ([1, 16] if name in MODELS else [1, 8])
    if name == "resnet18":
        return image_spec("resnet18", torch_models.ResNet18(), args.image, batches)
    if name == "mobilenetv2":
        return image_spec("mobilenetv2", torch_models.MobileNetV2(), args.image, batches)
    if name in ("bert", "bert-optimized"):
        spec = bert_spec(
            args.bert_hidden, args.bert_layers, args.bert_seq, args.bert_vocab, batches
        )
        return optimized_bert_spec(spec, args.bert_hidden) if name == "bert-optimized" else spec
    if name in LLMS:
        return llm_spec(args.batches or [1], args.llm_prompts)
    return zoo_spec(name, args, batches)


def compile_count(runner: GraphRunner) -> int:
    """How many graphs graph mode has compiled or loaded from its store so far."""
    return runner.compile_count + runner.loaded_count


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


def _max_diff(ours: list[np.ndarray], theirs: list[np.ndarray]) -> float:
    return max(float(np.abs(a - b).max()) for a, b in zip(ours, theirs, strict=True))


def _mean_diff(ours: list[np.ndarray], theirs: list[np.ndarray]) -> float:
    """The mean absolute difference over every element of every output."""
    diffs = [np.abs(a - b).ravel() for a, b in zip(ours, theirs, strict=True)]
    return float(np.concatenate(diffs).mean())


def torch_compiled(module: Callable[..., object]) -> Callable[..., object]:
    """``module`` as torch runs it best on the CPU: compiled by inductor with its weights
    frozen in (constant-folded, convolution and linear weights prepacked), one graph per
    input shape."""
    import torch._dynamo
    import torch._inductor.config

    torch._inductor.config.freezing = True
    torch._dynamo.config.recompile_limit = 64  # every shape and batch the run uses
    return torch.compile(module, dynamic=False)


def torch_onednn_graph(module: Callable[..., object]) -> Callable[..., object]:
    """``module`` traced to TorchScript for each input shape (``torch.jit.trace``), frozen, and
    run through oneDNN Graph: convolutions, linears and their elementwise successors become
    compiled oneDNN partitions, with weights packed once. The fuser works while a new shape's
    first runs are profiled and optimised, so TorchScript's (process-wide) fusion flag is on
    for the trace and three runs only; the fused plan stays after it."""
    traced: dict[tuple[torch.Size, ...], Callable[..., object]] = {}

    def run(*xs: torch.Tensor) -> object:
        key = tuple(x.shape for x in xs)
        fn = traced.get(key)
        if fn is None:
            enabled = torch.jit.onednn_fusion_enabled()
            torch.jit.enable_onednn_fusion(True)
            try:
                with warnings.catch_warnings():  # TorchScript's deprecation and tracer warnings
                    warnings.simplefilter("ignore")
                    fn = torch.jit.freeze(torch.jit.trace(module, xs, check_trace=False))
                    for _ in range(3):
                        fn(*xs)
            finally:
                torch.jit.enable_onednn_fusion(enabled)
            traced[key] = fn
        return fn(*xs)

    return run


def bench_model(
    spec: Spec, args: argparse.Namespace, threads: int, rows: list[Row], notes: list[str]
) -> None:
    """Append the set-up row and one row pair per variant and batch size for ``spec``, and a
    note on its graph-mode compiles (and its profiles)."""
    compiled = onednn_graph = None
    if args.torch_compiled and spec.module is not None:
        compiled = torch_compiled(spec.module)
    if args.torch_onednn_graph and spec.module is not None:
        onednn_graph = torch_onednn_graph(spec.module)
    rep, prepare_s = time_once(lambda: sonnx.prepare(spec.onnx_bytes))
    graph_rep = None if args.eager_only else sonnx.prepare(spec.onnx_bytes, use_graph=True)
    session, session_s = time_once(lambda: ort_session(spec.onnx_bytes, threads, args.ort_spinning))
    rows.append(Row(f"{spec.name} set-up", prepare_s, session_s, "InferenceSession()"))
    compile_total = 0.0
    for label, make_inputs in spec.variants.items():
        for batch in spec.batches:
            feed = make_inputs(batch)
            arrays = [feed[n] for n in rep.inputs]

            def ours(arrays: list[np.ndarray] = arrays) -> list[np.ndarray]:
                return [tensor.to_numpy(t) for t in rep.run(arrays)]

            def graph(arrays: list[np.ndarray] = arrays) -> list[np.ndarray]:
                return [tensor.to_numpy(t) for t in graph_rep.run(arrays)]

            def theirs(feed: Feeds = feed) -> list[np.ndarray]:
                return session.run(None, feed)

            def eager(feed: Feeds = feed) -> object:
                with torch.no_grad():
                    return spec.module(*(torch.from_numpy(a) for a in feed.values()))

            def torch_graph(feed: Feeds = feed) -> object:
                with torch.no_grad():
                    return compiled(*(torch.from_numpy(a) for a in feed.values()))

            def torch_llga(feed: Feeds = feed) -> object:
                with torch.no_grad():
                    return onednn_graph(*(torch.from_numpy(a) for a in feed.values()))

            reference, eager_out = theirs(), ours()
            results = [("", ours, _max_diff(eager_out, reference))]
            if graph_rep is not None:
                graph_out, compile_s = time_once(graph)
                compile_total += compile_s
                results.append((" graph", graph, _max_diff(graph_out, reference)))
            sides = [run for _, run, _ in results] + [theirs]
            sides += [eager] if spec.module is not None else []
            torch_compile_s = None
            if compiled is not None:
                _, torch_compile_s = time_once(torch_graph)
                sides.append(torch_graph)
            if onednn_graph is not None:
                _, llga_trace_s = time_once(torch_llga)
                sides.append(torch_llga)
            timings = time_sides(sides, args.repeats, args.warmup)
            ort_timing, torch_timing = timings[len(results)], timings[len(results) + 1 :]
            torch_s = torch_timing[0].median if torch_timing else None
            compiled_s = torch_timing[1].median if compiled is not None else None
            llga_s = torch_timing[-1].median if onednn_graph is not None else None
            case = f"{spec.name} {label} batch {batch}"
            for (suffix, _, max_diff), timing in zip(results, timings, strict=False):
                rows.append(
                    row_from(
                        case + suffix,
                        "onnxruntime run()",
                        (timing, ort_timing),
                        max_abs_diff=max_diff,
                        torch_ms=None if torch_s is None else torch_s * 1e3,
                        vs_torch=None if torch_s is None else timing.median / torch_s,
                    )
                )
            if compiled_s is not None:
                rows[-1].extra["torch_compiled_ms"] = compiled_s * 1e3
                rows[-1].extra["vs_compiled"] = timings[len(results) - 1].median / compiled_s
                notes.append(f"torch.compile {case}: first call {torch_compile_s:.1f} s")
            if llga_s is not None:
                rows[-1].extra["torch_onednn_graph_ms"] = llga_s * 1e3
                rows[-1].extra["vs_onednn_graph"] = timings[len(results) - 1].median / llga_s
                rows[-1].extra["onednn_graph_ratio"] = llga_s / ort_timing.median
                notes.append(f"oneDNN Graph {case}: trace, freeze, 4 runs {llga_trace_s:.1f} s")
            if graph_rep is not None:
                rows[-1].extra["compile_s"] = compile_s
                rows[-1].extra["compiles"] = compile_count(graph_rep.graph_runner)
                rows[-1].extra["eager_max"] = _max_diff(graph_out, eager_out)
                rows[-1].extra["eager_mean"] = _mean_diff(graph_out, eager_out)
            if args.profile:
                notes.append(f"-- sonnx {case}\n{profile_sonnx(ours, args.profile)}")
    if graph_rep is None:
        return
    runner = graph_rep.graph_runner
    notes.append(
        f"graph {spec.name}: {compile_count(runner)} compiles, {compile_total:.1f} s in first "
        f"runs; {runner.fallback or 'the whole graph compiled'}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--models", nargs="+", choices=(*MODELS, *ZOO, *LLMS, "zoo", "all"),
        default=list(MODELS),
        metavar="MODEL",
        help=f"any of {', '.join(MODELS + ZOO)}; 'zoo' for the stand-ins, 'all' for every "
        f"model (default: {' '.join(MODELS)})",
    )  # fmt: skip
    parser.add_argument(
        "--batches", nargs="+", type=int, default=None,
        help="batch sizes (default: 1 16 for the original models, 1 8 for the zoo stand-ins)",
    )  # fmt: skip
    parser.add_argument("--image", type=int, default=224, help="CNN input side")
    parser.add_argument(
        "--det-sizes", nargs="+", default=["320x320", "480x640", "640x640"], metavar="HxW",
        help="yolov8 and dbnet input sizes (multiples of 32)",
    )  # fmt: skip
    parser.add_argument(
        "--rec-widths", nargs="+", type=int, default=[160, 320], help="crnn input widths"
    )
    parser.add_argument(
        "--qbert-seqs", nargs="+", type=int, default=[16, 128], help="bert-int8 sequence lengths"
    )
    parser.add_argument(
        "--llm-prompts", nargs="+", type=int, default=[128], help="llm-int4 prompt lengths"
    )
    parser.add_argument("--bert-hidden", type=int, default=128)
    parser.add_argument("--bert-layers", type=int, default=4)
    parser.add_argument("--bert-seq", type=int, default=64)
    parser.add_argument("--bert-vocab", type=int, default=1000)
    parser.add_argument(
        "--eager-only", action="store_true", help="leave out graph mode (no compiles: quick)"
    )
    parser.add_argument(
        "--profile", type=int, default=0, metavar="N", help="print sonnx's top N torch ops"
    )
    parser.add_argument(
        "--torch-compiled",
        action="store_true",
        help="also time the torch module under torch.compile with frozen weights (a compile "
        "per shape: slow)",
    )
    parser.add_argument(
        "--torch-onednn-graph",
        action="store_true",
        help="also time the torch module traced to TorchScript per shape and run through "
        "oneDNN Graph (torch.jit.enable_onednn_fusion)",
    )
    parser.add_argument(
        "--ort-spinning",
        action="store_true",
        help="let onnxruntime's threads spin between runs (they then slow the torch side down)",
    )
    add_common_args(parser, repeats=9, warmup=2)
    args = parser.parse_args()
    threads = pin_threads(args.threads)
    sonnx.tune_process_for_serving()  # as a server would (both sides alike)
    autograd.training = False
    rows: list[Row] = []
    model_notes: list[str] = []
    groups = {"zoo": ZOO, "all": MODELS + ZOO + LLMS}
    names = [n for m in args.models for n in groups.get(m, (m,))]
    for name in dict.fromkeys(names):
        bench_model(build(name, args), args, threads, rows, model_notes)
    emit(
        "infer: sonnx SingaRep.run vs onnxruntime InferenceSession.run",
        machine_facts(threads),
        {
            "repeats": args.repeats,
            "warmup": args.warmup,
            "opset": OPSET,
            "ort_spinning": args.ort_spinning,
            "batches": args.batches or "1 16 (original models), 1 8 (zoo)",
            "image": args.image,
            "bert": f"hidden {args.bert_hidden}, {args.bert_layers} layers, seq {args.bert_seq}, "
            f"vocab {args.bert_vocab}",
            "det_sizes": " ".join(args.det_sizes),
            "rec_widths": " ".join(map(str, args.rec_widths)),
            "qbert_seqs": " ".join(map(str, args.qbert_seqs)),
        },
        rows,
        args.json,
        extra_columns=(
            "torch_ms",
            "vs_torch",
            "torch_compiled_ms",
            "vs_compiled",
            "torch_onednn_graph_ms",
            "vs_onednn_graph",
            "onednn_graph_ratio",
            "max_abs_diff",
            "eager_max",
            "eager_mean",
            "compile_s",
            "compiles",
        ),
        notes=[
            "set-up rows: sonnx.prepare() vs onnxruntime session creation, once, from bytes",
            "max_abs_diff: largest |sonnx - onnxruntime| over the outputs",
            "graph rows: sonnx.prepare(..., use_graph=True), graphs with symbolic sizes; "
            "compile_s: the first run at the shape (trace + compile if it needs a new graph), "
            "not in the timings",
            "compiles: graphs compiled so far for the model (segments x the shapes that need "
            "their own graph)",
            "eager_max, eager_mean (graph rows): the largest and the mean |graph - eager| over "
            "every element of the outputs, on the same inputs: what graph mode's compile "
            "changed in the results",
            "torch_ms: the source torch.nn module in eager mode under no_grad (BatchNorm folded "
            "into Conv like the file, except in yolov8, whose shape-dependent head torch.fx "
            "cannot trace); "
            "vs_torch = sonnx / torch eager, i.e. sonnx's own overhead over its backend; none "
            "for bert-int8 (its float module computes another function)",
            "torch_compiled_ms (--torch-compiled): the same module under torch.compile with "
            "inductor's freezing, one graph per shape; vs_compiled = the last sonnx row (graph "
            "mode, or eager with --eager-only) / it",
            "torch_onednn_graph_ms (--torch-onednn-graph): the same module traced to TorchScript "
            "per shape, frozen, through oneDNN Graph; vs_onednn_graph = the last sonnx row / it; "
            "onednn_graph_ratio = it / onnxruntime",
            "bert-int8 max_abs_diff: onnxruntime fuses DequantizeLinear + MatMul into "
            "com.microsoft.MatMulNBits, which approximates (about 1e-2); sonnx computes the "
            "ONNX definition",
            *model_notes,
        ],
    )


if __name__ == "__main__":
    main()
