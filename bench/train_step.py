"""One training step of sonnx against the same network in native PyTorch, side by side.

    python bench/train_step.py                      # all three cases, default sizes
    python bench/train_step.py --cases cnn layer --repeats 21 --json

A step is forward, softmax cross-entropy, backward and an SGD-momentum update on one batch
(the same batch every step). Cases:

- ``cnn``: the seed walkthrough CNN (``sonnx.walkthrough.CNN``, autograd layer forms), batch
  64 of 1x28x28;
- ``resnet18``: ``torch_models.ResNet18`` exported to ONNX with its BatchNormalization nodes
  kept, imported with :class:`sonnx.SONNXModel` (weights are the torch module's) and trained
  with ``train_one_batch``; default batch 16 at 112x112;
- ``layer``: the walkthrough CNN written with ``sonnx.layer`` / ``sonnx.model.Model``;
- ``bert``: ``torch_models.TinyBert`` (hidden 128, 4 layers, 2 labels) exported to ONNX and
  imported with :class:`sonnx.SONNXModel`, trained with ``train_one_batch`` on ``[batch,
  sequence]`` int64 token ids and attention masks; default batch 4 at sequence 128;
- ``bert-graph``: the same, compiled with ``use_graph=True`` (forward and backward through
  ``torch.compile``), against the same eager torch step; its first step traces and compiles
  (the ``first_s`` column: both sides' first step, untimed otherwise);
- ``bert-graph-vs-compiled``: the same graph-mode step against the torch module under
  ``torch.compile`` (forward and backward through inductor too): how graph mode compares with
  what inductor makes of the same network natively.

The reference is ``torch.nn`` + ``torch.optim.SGD`` with the same weights, batch and
hyper-parameters. Before timing, one step is run on fresh copies of both sides and the two
losses are compared, so a ratio is only reported for networks that compute the same thing.
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
    pin_threads,
    row_from,
    time_once,
    time_pair,
)
from torch import nn

import sonnx
from sonnx import autograd, opt, tensor
from sonnx.testing import torch_models
from sonnx.walkthrough import CNN, LayerCNN

LR = 0.05
MOMENTUM = 0.9
CASES = ("cnn", "resnet18", "layer", "bert", "bert-graph", "bert-graph-vs-compiled")


def torch_cnn() -> nn.Sequential:
    """The walkthrough CNN in torch.nn."""
    return nn.Sequential(
        nn.Conv2d(1, 20, 5),
        nn.ReLU(),
        nn.MaxPool2d(2, 2),
        nn.Conv2d(20, 50, 5),
        nn.ReLU(),
        nn.MaxPool2d(2, 2),
        nn.Flatten(),
        nn.Linear(4 * 4 * 50, 500),
        nn.ReLU(),
        nn.Linear(500, 10),
    )


def copy_cnn_weights(params: list[tuple[tensor.Tensor, tensor.Tensor]], net: nn.Sequential) -> None:
    """Copy (W, b) pairs of conv1, conv2, linear1, linear2 into the torch CNN.

    sonnx's Linear keeps W as (in, out), torch's as (out, in).
    """
    modules = [m for m in net if isinstance(m, (nn.Conv2d, nn.Linear))]
    with torch.no_grad():
        for (w, b), m in zip(params, modules, strict=True):
            weight = w.data if isinstance(m, nn.Conv2d) else w.data.t()
            m.weight.copy_(weight)
            m.bias.copy_(b.data)


@dataclass
class Case:
    """A pair of step functions over the same batch, plus their one-step losses."""

    name: str
    sonnx_step: Callable[[], float]
    torch_step: Callable[[], float]
    batch: str
    setup_s: float = 0.0


def torch_stepper(net: nn.Module, x: np.ndarray, y: np.ndarray) -> Callable[[], float]:
    """A native step: forward, cross-entropy, backward, SGD-momentum update."""
    sgd = torch.optim.SGD(net.parameters(), lr=LR, momentum=MOMENTUM)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    net.train()

    def step() -> float:
        sgd.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(net(xt), yt)
        loss.backward()
        sgd.step()
        return loss.detach()

    return step


def batch_of(n: int, shape: tuple[int, ...], classes: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, *shape)).astype(np.float32)
    y = rng.integers(0, classes, n).astype(np.int64)
    return x, y


def cnn_case(batch: int) -> Case:
    """(a) ``sonnx.walkthrough.CNN`` with autograd forms and ``opt.SGD``."""
    x, y = batch_of(batch, (1, 28, 28), 10)
    net = CNN()
    ref = torch_cnn()
    copy_cnn_weights([(m.W, m.b) for m in (net.conv1, net.conv2, net.linear1, net.linear2)], ref)
    sgd = opt.SGD(lr=LR, momentum=MOMENTUM)
    tx = tensor.Tensor(data=x, requires_grad=False)
    ty = tensor.Tensor(data=y, requires_grad=False)

    def step() -> float:
        autograd.training = True
        loss = autograd.softmax_cross_entropy(net.forward(tx), ty)
        sgd(loss)
        return loss.data.detach()

    return Case("walkthrough CNN (autograd)", step, torch_stepper(ref, x, y), f"{batch}x1x28x28")


def layer_case(batch: int) -> Case:
    """(c) the same CNN with ``sonnx.layer`` / ``sonnx.model.Model``."""
    x, y = batch_of(batch, (1, 28, 28), 10)
    net = LayerCNN()
    net.set_optimizer(opt.SGD(lr=LR, momentum=MOMENTUM))
    net.compile([tensor.PlaceHolder((batch, 1, 28, 28))], is_train=True)
    ref = torch_cnn()
    copy_cnn_weights([(m.W, m.b) for m in (net.conv1, net.conv2, net.linear1, net.linear2)], ref)
    tx = tensor.Tensor(data=x, requires_grad=False)
    ty = tensor.Tensor(data=y, requires_grad=False)
    net.train()  # once, as the reference side does

    def step() -> float:
        autograd.training = True  # the other cases may have changed the module flag
        _, loss = net(tx, ty)
        return loss.data.detach()

    return Case("walkthrough CNN (layer/Model)", step, torch_stepper(ref, x, y), f"{batch}x1x28x28")


def resnet_case(batch: int, image: int, width: int) -> Case:
    """(b) ResNet-18 exported with BatchNormalization kept, imported as a SONNXModel."""
    torch.manual_seed(0)
    ref = torch_models.ResNet18(num_classes=1000, width=width)
    randomize_batchnorm(ref)
    x, y = batch_of(batch, (3, image, image), 1000)
    proto, export_s = time_once(
        lambda: torch_models.export(
            ref, (torch.from_numpy(x[:1]),), 17, ["input"], keep_batchnorm=True
        )
    )
    net, prepare_s = time_once(lambda: sonnx.SONNXModel(proto))
    net.set_optimizer(opt.SGD(lr=LR, momentum=MOMENTUM))
    tx = tensor.Tensor(data=x, requires_grad=False)
    ty = tensor.Tensor(data=y, requires_grad=False)
    net.train()  # once, as the reference side does

    def step() -> float:
        autograd.training = True  # the other cases may have changed the module flag
        _, loss = net(tx, ty)
        return loss.data.detach()

    case = Case(
        f"ResNet-18 w{width} (imported ONNX)",
        step,
        torch_stepper(ref, x, y),
        f"{batch}x3x{image}x{image}",
    )
    case.setup_s = export_s + prepare_s
    return case


def bert_case(
    batch: int, seq: int, use_graph: bool = False, compiled_reference: bool = False
) -> Case:
    """(d) A BERT-style encoder exported to ONNX, imported as a SONNXModel (in graph mode
    with ``use_graph``), against the torch module (under ``torch.compile`` with
    ``compiled_reference``)."""
    torch.manual_seed(0)
    ref = torch_models.TinyBert(vocab=1000, hidden=128, heads=4, layers=4, ffn=512, max_len=seq)
    ids, mask = torch_models.bert_inputs(batch, seq, 1000)
    labels = np.random.default_rng(0).integers(0, 2, batch).astype(np.int64)
    names = ["input_ids", "attention_mask"]
    proto, export_s = time_once(lambda: torch_models.export(ref, (ids, mask), 17, names))
    net, prepare_s = time_once(lambda: sonnx.SONNXModel(proto))
    net.set_optimizer(opt.SGD(lr=LR, momentum=MOMENTUM))
    tids, tmask = (tensor.Tensor(data=t.numpy(), requires_grad=False) for t in (ids, mask))
    ty = tensor.Tensor(data=labels, requires_grad=False)
    if use_graph:
        net.compile([tids, tmask], is_train=True, use_graph=True)
    net.train()

    def step() -> float:
        autograd.training = True  # the other cases may have changed the module flag
        out = net.forward(tids, tmask)[0]
        loss = autograd.softmax_cross_entropy(out, ty)
        net.optimizer(loss)
        return loss.data.detach()

    sgd = torch.optim.SGD(ref.parameters(), lr=LR, momentum=MOMENTUM)
    yt = torch.from_numpy(labels)
    ref.train()
    forward = torch.compile(ref) if compiled_reference else ref

    def torch_step() -> float:
        sgd.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(forward(ids, mask), yt)
        loss.backward()
        sgd.step()
        return loss.detach()

    name = "BERT-style h128 L4 (imported ONNX" + (", graph mode)" if use_graph else ")")
    name += " vs torch.compile" if compiled_reference else ""
    case = Case(name, step, torch_step, f"{batch}x{seq}")
    case.setup_s = export_s + prepare_s
    return case


def randomize_batchnorm(net: nn.Module) -> None:
    """Give every BatchNorm distinct, trained-looking parameters and statistics.

    With fresh ones/zeros, torch's exporter deduplicates equal initializers into ``Identity``
    nodes (a BN weight and a running variance become one tensor), and sonnx's in-place
    running-statistics update then writes into the shared weight (see bench/README.md).
    """
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0.0, 0.1)
                m.running_mean.normal_(0.0, 0.1)
                m.running_var.uniform_(0.5, 1.5)


def first_losses(case: Case) -> tuple[float, float]:
    """The loss of the first step on each side (before any update)."""
    return float(case.sonnx_step()), float(case.torch_step())


def build(name: str, args: argparse.Namespace) -> Case:
    if name == "cnn":
        return cnn_case(args.batch)
    if name == "layer":
        return layer_case(args.batch)
    if name in ("bert", "bert-graph"):
        return bert_case(args.bert_batch, args.bert_seq, use_graph=name == "bert-graph")
    if name == "bert-graph-vs-compiled":
        return bert_case(args.bert_batch, args.bert_seq, use_graph=True, compiled_reference=True)
    return resnet_case(args.resnet_batch, args.resnet_image, args.resnet_width)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    parser.add_argument("--batch", type=int, default=64, help="CNN batch size")
    parser.add_argument("--resnet-batch", type=int, default=16)
    parser.add_argument("--resnet-image", type=int, default=112, help="ResNet input side")
    parser.add_argument("--resnet-width", type=int, default=64, help="64 is real ResNet-18")
    parser.add_argument("--bert-batch", type=int, default=4)
    parser.add_argument("--bert-seq", type=int, default=128)
    add_common_args(parser, repeats=9, warmup=3)
    args = parser.parse_args()
    if args.warmup < 1:
        parser.error("--warmup must be at least 1 (the first step also checks the losses)")
    threads = pin_threads(args.threads)
    sonnx.tune_process_for_serving()  # as a server would (both sides alike)
    rows: list[Row] = []
    for name in args.cases:
        case = build(name, args)
        # The first step of each side, from identical weights, is the first warm-up call.
        (ours, theirs), first_s = time_once(lambda case=case: first_losses(case))
        timings = time_pair(case.sonnx_step, case.torch_step, args.repeats, args.warmup - 1)
        rows.append(
            row_from(
                case.name,
                "torch.nn + optim.SGD",
                timings,
                batch=case.batch,
                loss_diff=abs(ours - theirs),
                setup_s=case.setup_s or None,
                first_s=first_s,
            )
        )
    autograd.training = False
    emit(
        "train_step: forward + loss + backward + SGD-momentum update",
        machine_facts(threads),
        {
            "repeats": args.repeats,
            "warmup": args.warmup,
            "lr": LR,
            "momentum": MOMENTUM,
            "resnet": f"batch {args.resnet_batch} at {args.resnet_image}x{args.resnet_image}, "
            f"width {args.resnet_width}",
        },
        rows,
        args.json,
        extra_columns=("batch", "loss_diff", "setup_s", "first_s"),
        notes=[
            "loss_diff: |sonnx - torch| first-step loss from identical weights",
            "setup_s: torch ONNX export + SONNXModel import, once",
            "first_s: both sides' first step, untimed (graph mode traces and compiles in it)",
        ],
    )


if __name__ == "__main__":
    main()
