"""sonnx on a CUDA GPU against the same torch modules, in short sections a device check runs.

    python bench/gpu.py infer --out rows.md          # eager: zoo CNNs and a BERT-style encoder
    python bench/gpu.py graph --out rows.md          # graph mode against torch.compile
    python bench/gpu.py train --out rows.md          # one training step against native torch
    python bench/gpu.py decode --out rows.md         # greedy generation against a torch decoder
    python bench/gpu.py infer --device cpu --image 32 --repeats 2   # check the code on a CPU

Sections (each a separate process in ``scripts/gpu-check.sh``, so a slow compile cannot take
the others' rows with it):

- ``infer``: the ResNet-50 and MobileNet-v3 stand-ins (``sonnx.testing.zoo_vision``, at
  ``--image``) and ``bert``, a BERT-style encoder (``torch_models.TinyBert``, hidden 256, 4
  layers, sequence 128), exported to ONNX and imported with :func:`sonnx.prepare` on the device, run
  eagerly at each of ``--batches``, against the torch module (BatchNorm folded as in the file)
  run eagerly on the same device;
- ``graph``: one model (``--graph-model``) in sonnx's graph mode (inductor; Triton kernels on a
  GPU) against the module under ``torch.compile(dynamic=True)``; graph mode traces with
  symbolic sizes and compiles once, torch specialises a size of 1 and compiles for batch 1
  apart; the note gives each side's first call at each batch (compiling or not);
- ``train``: a step (forward, softmax cross-entropy, backward, SGD-momentum) of the
  walkthrough CNN (autograd forms, batch 64) and of the BERT-style encoder (hidden 128, 4
  layers, batch 8 x 128) imported with :class:`sonnx.SONNXModel`, against the torch module with
  ``torch.optim.SGD`` on the same device, from the same weights (first losses checked equal);
- ``decode``: greedy generation with a GroupQueryAttention decoder in onnxruntime-genai's
  layout, sonnx eager, graph mode and graph mode with ``cuda_graph=True`` against the same
  decoder in torch, at ``--batches`` (default 1 and 8 there): prefill ms and decode tokens/s
  (:mod:`gpu_decode`, whose flags size the decoder).

Inputs live on the device before timing; each call is followed by ``torch.cuda.synchronize``
and the median of ``--repeats`` interleaved calls (after warm-up) is reported. The ratio is
sonnx / torch: below 1 means sonnx is faster. Each row is one Markdown table line, printed and
appended to ``--out``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import torch
from gpu_decode import add_arguments as add_decode_arguments
from gpu_decode import bench_decode
from torch import nn
from torch.fx.experimental.optimization import fuse
from train_step import LR, MOMENTUM, copy_cnn_weights, torch_cnn

import sonnx
from sonnx import autograd, opt
from sonnx.device import Device, set_seed
from sonnx.tensor import Tensor
from sonnx.testing import torch_models, zoo_vision
from sonnx.walkthrough import CNN

OPSET = 17
HEADER = "| case | batch | sonnx ms | torch ms | sonnx / torch | note |\n|---|---|---|---|---|---|"
Step = Callable[[], object]


def timed_pair(
    ours: Step, theirs: Step, dev: Device, repeats: int, warmup: int
) -> tuple[float, float]:
    """Median milliseconds of ``ours`` and ``theirs``, alternated call by call, each call
    waited for on the device."""
    for _ in range(warmup):
        ours()
        theirs()
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeats):
        for fn, into in ((ours, times[0]), (theirs, times[1])):
            dev.synchronize()
            start = time.perf_counter()
            fn()
            dev.synchronize()
            into.append(time.perf_counter() - start)
    return statistics.median(times[0]) * 1e3, statistics.median(times[1]) * 1e3


def first_call_s(fn: Step, dev: Device) -> float:
    start = time.perf_counter()
    fn()
    dev.synchronize()
    return time.perf_counter() - start


def row(case: str, batch: str, ours_ms: float, theirs_ms: float, note: str) -> str:
    ratio = ours_ms / theirs_ms
    return f"| {case} | {batch} | {ours_ms:.2f} | {theirs_ms:.2f} | {ratio:.2f} | {note} |"


def max_diff(ours: object, theirs: torch.Tensor) -> float:
    first = ours[0] if isinstance(ours, list) else ours
    return float((first.data - theirs).abs().max())


# ---- models -------------------------------------------------------------------------------


def image_model(name: str, image: int) -> tuple[bytes, nn.Module, Callable]:
    """A zoo CNN stand-in: (ONNX bytes, the module with BatchNorm folded, inputs(batch))."""
    torch.manual_seed(0)
    module = (zoo_vision.ResNet50() if name == "resnet50" else zoo_vision.MobileNetV3()).eval()
    model = zoo_vision.export_image_model(module, OPSET, size=image)

    def images(batch: int) -> list[torch.Tensor]:
        return [torch.randn(batch, 3, image, image)]

    return model.SerializeToString(), fuse(module), images


def bert_model(name: str, image: int) -> tuple[bytes, nn.Module, Callable]:
    """The BERT-style encoder (hidden 256, 4 layers) at sequence 128 (``image`` unused)."""
    torch.manual_seed(0)
    module = torch_models.TinyBert(vocab=1000, hidden=256, heads=8, layers=4, ffn=1024, max_len=128)

    def text(batch: int) -> list[torch.Tensor]:
        return list(torch_models.bert_inputs(batch, 128, 1000))

    names = ["input_ids", "attention_mask"]
    proto = torch_models.export(module.eval(), tuple(text(1)), OPSET, names)
    return proto.SerializeToString(), module.eval(), text


#: name -> builder(name, image side) of (ONNX bytes, torch module on the CPU, inputs(batch)).
MODELS = {"resnet50": image_model, "mobilenetv3": image_model, "bert": bert_model}


def bench_inference(
    name: str, spec: tuple, dev: Device, args: argparse.Namespace, graph: bool
) -> Iterator[str]:
    """Rows for one model at each batch size: sonnx eager against torch eager, or (``graph``)
    sonnx graph mode against torch.compile."""
    onnx_bytes, module, make_inputs = spec
    module = module.to(dev.torch_device)
    rep = sonnx.prepare(onnx_bytes, device=dev, use_graph=graph)
    reference = torch.compile(module, dynamic=True) if graph else module
    for batch in args.batches:
        xs = [x.to(dev.torch_device) for x in make_inputs(batch)]
        feeds = [Tensor(data=x, requires_grad=False) for x in xs]

        def ours(feeds: list[Tensor] = feeds) -> object:
            return rep.run(feeds)

        def theirs(xs: list[torch.Tensor] = xs) -> torch.Tensor:
            with torch.no_grad():
                return reference(*xs)

        note = ""
        if graph:
            firsts = first_call_s(ours, dev), first_call_s(theirs, dev)
            note = f"first call {firsts[0]:.1f} s / {firsts[1]:.1f} s; "
        note += f"max diff {max_diff(ours(), theirs()):.1e}"
        ours_ms, theirs_ms = timed_pair(ours, theirs, dev, args.repeats, args.warmup)
        mode = "graph vs torch.compile" if graph else "eager vs torch eager"
        yield row(f"{name} ({mode})", str(batch), ours_ms, theirs_ms, note)


# ---- training -----------------------------------------------------------------------------


def torch_step(net: nn.Module, xs: list[torch.Tensor], y: torch.Tensor) -> Step:
    sgd = torch.optim.SGD(net.parameters(), lr=LR, momentum=MOMENTUM)
    net.train()

    def step() -> torch.Tensor:
        sgd.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(net(*xs), y)
        loss.backward()
        sgd.step()
        return loss.detach()

    return step


def cnn_steps(dev: Device, batch: int) -> tuple[Step, Step]:
    """The walkthrough CNN (weights drawn on the CPU, moved) and its torch twin."""
    set_seed(0)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, 1, 28, 28)).astype(np.float32)
    y = rng.integers(0, 10, batch).astype(np.int64)
    net = CNN()
    params = [(m.W, m.b) for m in (net.conv1, net.conv2, net.linear1, net.linear2)]
    ref = torch_cnn()
    copy_cnn_weights(params, ref)
    for pair in params:
        for t in pair:
            t.to_device(dev)
    sgd = opt.SGD(lr=LR, momentum=MOMENTUM)
    tx = Tensor(data=x, device=dev, requires_grad=False)
    ty = Tensor(data=y, device=dev, requires_grad=False)

    def step() -> torch.Tensor:
        autograd.training = True
        loss = autograd.softmax_cross_entropy(net.forward(tx), ty)
        sgd(loss)
        return loss.data.detach()

    xs = [torch.from_numpy(x).to(dev.torch_device)]
    return step, torch_step(ref.to(dev.torch_device), xs, torch.from_numpy(y).to(dev.torch_device))


def bert_steps(dev: Device, batch: int) -> tuple[Step, Step]:
    """TinyBert h128 L4 imported as a SONNXModel on ``dev``, and the module itself."""
    torch.manual_seed(0)
    ref = torch_models.TinyBert(vocab=1000, hidden=128, heads=4, layers=4, ffn=512, max_len=128)
    ids, mask = torch_models.bert_inputs(batch, 128, 1000)
    labels = torch.from_numpy(np.random.default_rng(0).integers(0, 2, batch).astype(np.int64))
    proto = torch_models.export(ref, (ids, mask), OPSET, ["input_ids", "attention_mask"])
    net = sonnx.SONNXModel(proto, device=dev)
    net.set_optimizer(opt.SGD(lr=LR, momentum=MOMENTUM))
    feeds = [Tensor(data=t.numpy(), device=dev, requires_grad=False) for t in (ids, mask)]
    ty = Tensor(data=labels.numpy(), device=dev, requires_grad=False)
    net.train()

    def step() -> torch.Tensor:
        autograd.training = True
        loss = autograd.softmax_cross_entropy(net.forward(*feeds)[0], ty)
        net.optimizer(loss)
        return loss.data.detach()

    xs = [ids.to(dev.torch_device), mask.to(dev.torch_device)]
    return step, torch_step(ref.to(dev.torch_device), xs, labels.to(dev.torch_device))


def bench_training(dev: Device, args: argparse.Namespace) -> Iterator[str]:
    cases = (
        ("walkthrough CNN train step", 64, "64x1x28x28", cnn_steps),
        ("BERT-style h128 L4 (imported) train step", 8, "8x128", bert_steps),
    )
    for name, batch, label, make in cases:
        ours, theirs = make(dev, batch)
        first = float(ours()), float(theirs())
        note = f"first losses {first[0]:.4f} / {first[1]:.4f}"
        ours_ms, theirs_ms = timed_pair(ours, theirs, dev, args.repeats, args.warmup)
        yield row(name, label, ours_ms, theirs_ms, note)


# ---- main ---------------------------------------------------------------------------------


def rows(section: str, dev: Device, args: argparse.Namespace) -> Iterator[str]:
    if section == "train":
        yield from bench_training(dev, args)
        return
    if section == "decode":
        yield from bench_decode(dev, args)
        return
    for name in [args.graph_model] if section == "graph" else list(MODELS):
        spec = MODELS[name](name, args.image)
        yield from bench_inference(name, spec, dev, args, graph=section == "graph")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("section", choices=["infer", "graph", "train", "decode"])
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu, to check the code")
    parser.add_argument(
        "--batches", type=int, nargs="+", help="batch sizes (default: 1 32; decode: 1 8)"
    )
    parser.add_argument("--image", type=int, default=224, help="image side of the CNNs")
    parser.add_argument(
        "--graph-model", default="resnet50", choices=list(MODELS), help="the graph section's model"
    )
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--out", type=Path, help="append the rows (Markdown) to this file")
    add_decode_arguments(parser)
    args = parser.parse_args()
    if args.batches is None:
        args.batches = [1, 8] if args.section == "decode" else [1, 32]
    dev = Device(args.device)
    autograd.training = False
    print(HEADER, flush=True)
    for line in rows(args.section, dev, args):
        print(line, flush=True)
        if args.out is not None:  # row by row: a section stopped by its time limit keeps them
            with args.out.open("a") as f:
                f.write(line + "\n")


if __name__ == "__main__":
    main()
