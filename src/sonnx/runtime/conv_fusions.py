"""Conv chains in eager CPU inference: each Conv with its BatchNormalization and activation as
one oneDNN call, in channels-last layout, with weights prepacked once.

Node by node, an imported CNN runs ``F.conv2d`` on NCHW tensors, then the BatchNormalization
and the activation as separate passes over memory. On the CPU, torch's own kernels do much
better when (measured on ResNet-18, MobileNet-v2/v3, YOLOv8- and DBNet-style stand-ins, one
thread): activations are channels-last (oneDNN's depthwise and 1x1 kernels are several times
faster than on NCHW, and every output stays channels-last, so only the first conv converts);
the weight is reordered once per image size into oneDNN's blocked layout
(``_reorder_convolution_weight``) instead of at every call; BatchNormalization is folded into
the weight and bias; and the activation (Relu, Clip as ReLU6, HardSwish, HardSigmoid,
Sigmoid, Sigmoid-Mul as SiLU, LeakyRelu) is applied by the convolution as a post-op
(``torch.ops.mkldnn._convolution_pointwise``, the call inductor makes for the same pattern).

A Conv left out would run ``F.conv2d`` on the channels-last output of the conv before it,
with its NCHW weight converted at every call (up to several times slower than either layout
alone, and 1x1 convs at batch 1 take torch's slow unfused path), so every 2-D Conv with
known weights is in a group. A Conv whose input only it reads from the previous unit joins
that group (a *chain*: MobileNet's projection convs, ResNet's second conv of a block, YOLO's
head convs); any other is a group by itself (ResNet's downsampling conv, an FPN's convs).

The fused path is for inference only, and only on CPU float32: while ``sonnx.autograd.training``
is on or gradients are recorded, while a graph is traced for graph mode (the trace must stay
plain aten ops for the compiler), for any other device or dtype, and for shapes the fused call
does not take (a bad input, which the Conv node then reports), the group runs
its nodes one by one, exactly as without the fusion. The prepared weights are keyed on the
weight tensors' identity and version, so an optimizer step, ``set_states`` or ``load_states``
is seen at the next run.

oneDNN picks the blocked layout of a weight for the image size it is packed at, and a weight
packed for another size is converted back at every call by its generic reorder, slower than
the convolution itself: YOLOv8-style at 640x640 ran 2.2x onnxruntime with weights packed at
320x320, 1.1x with weights packed at 640x640. So a unit packs its weight once for each image
size (height and width; the batch does not change the layout's cost measurably) for the first
``_PACKS_KEPT`` sizes, and gives the plain weight, which oneDNN reorders fast at each call, to
any size after those (an OCR model sees a new width at almost every call).

Not fused, because measurements showed no consistent gain: the residual ``Add`` as oneDNN's
binary post-op (``_convolution_pointwise.binary``) ran within the noise (a few per cent, either
way) of a separate ``Add``. Also measured and dropped: ``F.conv2d`` on channels-last tensors
with the activation in place after it (no prepacking: 5-25 % slower than the fused call on
whole models), oneDNN's blocked tensors (``to_mkldnn``: depthwise convs 10-20 times slower) and
1x1 convs as ``F.linear`` (MKL's GEMM is about 2 times slower than oneDNN's at these shapes).
The exception is a 1x1 conv of a one-pixel image (squeeze-and-excitation after a global
pool): there oneDNN's ~50 us of set-up per call is most of the cost, and the unit computes
the matrix product instead (``_Unit._product``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from sonnx.engine.operator import is_training
from sonnx.engine.tracing import value_checks
from sonnx.operators.conv.windows import forward_pads, one_point, spatial_ints, torch_pad
from sonnx.tensor import Tensor

if TYPE_CHECKING:
    from sonnx.runtime.program_index import ProgramIndex
    from sonnx.runtime.steps import Step

__all__ = ["ConvChain", "ConvGroup", "find_conv_group"]

_MKLDNN = torch.backends.mkldnn.is_available()
_CHANNELS_LAST = torch.channels_last
_SHAPES_KEPT = 64  # input shapes whose geometry a unit keeps (dynamic sizes: OCR widths)
_PACKS_KEPT = 4  # image sizes a unit keeps a weight packed for (each a copy of the weight)
Unary = tuple[str, list[float]]  # oneDNN's post-op name and its scalars
# the convolution's symmetric pads, F.pad's amounts for asymmetric ones (else None), and
# whether the call is a matrix product (a 1x1 convolution of a one-pixel image, unpadded)
Geometry = tuple[list[int], list[int] | None, bool]
#: oneDNN's post-ops as torch calls, for the units computed as a matrix product
_POST_OPS: dict[str, Callable[..., torch.Tensor]] = {
    "none": lambda y: y,
    "relu": torch.relu_,
    "sigmoid": torch.sigmoid_,
    "swish": lambda y: F.silu(y, inplace=True),
    "hardswish": lambda y: F.hardswish(y, inplace=True),
    "hardsigmoid": lambda y: F.hardsigmoid(y, inplace=True),
    "hardtanh": F.hardtanh_,
    "leaky_relu": F.leaky_relu_,
}


@dataclass(frozen=True)
class ConvGroup:
    """A group found: its steps in order (the last computes the group's output), the names it
    reads from outside, and the callable computing it from their tensors."""

    name: str
    steps: tuple[int, ...]
    inputs: tuple[str, ...]
    compute: ConvChain


def find_conv_group(
    conv: int,
    steps: Sequence[Step],
    constants: dict[str, Tensor],
    index: ProgramIndex,
) -> ConvGroup | None:
    """The chain of Conv units starting at Conv step ``conv``, or None: each unit a Conv
    with weights known before the run (initializers, or values computed from them only), then
    optionally an inference-form BatchNormalization and an activation; the next unit is the
    Conv that alone reads the previous unit's output.

    :param conv: the Conv step's index.
    :param steps: the program's steps.
    :param constants: the program's constants by name.
    :param index: the producer and readers of each value (subgraph reads and graph outputs
        included): a unit's intermediate values must be read inside it only.
    :returns: the group, or None.
    """
    finder = _Finder(steps, constants, index)
    units: list[list[int]] = []
    found = finder.unit(conv)
    if found is None:
        return None
    while found is not None:
        units.append(found)
        out = steps[found[-1]].outputs[0]
        after = finder.only_reader(out)
        if after is None or steps[after].inputs[0] != out:
            break
        found = finder.unit(after)
    order = [i for unit in units for i in unit]
    inside = {o for i in order for o in steps[i].outputs}
    reads = (n for i in order for n in steps[i].inputs if n and n not in inside)
    inputs = tuple(dict.fromkeys(reads))
    chain = ConvChain([_Unit(unit, finder, inputs) for unit in units], inputs)
    return ConvGroup(chain.name, tuple(order), inputs, chain)


@dataclass
class _Finder:
    """Pattern matching over the plan's steps (one graph)."""

    steps: Sequence[Step]
    constants: dict[str, Tensor]
    index: ProgramIndex

    def weight(self, name: str) -> bool:
        """A constant, or computed from constants only (an Identity or Cast of one)."""
        if name in self.constants:
            return True
        producer = self.index.producer.get(name)
        return producer is not None and self.steps[producer].foldable

    def only_reader(self, name: str) -> int | None:
        """The one step reading ``name``, if ``name`` is not a graph output."""
        found = self.index.only_reader(name)
        return None if found is None or self.steps[found].foldable else found

    def unit(self, conv: int) -> list[int] | None:
        """The steps of the unit starting at ``conv``, if it is a Conv with known weights."""
        step = self.steps[conv]
        if (
            step.info.op_type != "Conv"
            or step.info.domain != ""
            or step.op is None
            or step.foldable
            or len(step.inputs) < 2
            or len(step.outputs) != 1
            or not self.weight(step.inputs[1])
            or (len(step.inputs) > 2 and step.inputs[2] and not self.weight(step.inputs[2]))
            or not self.planar(step)
        ):
            return None
        unit = [conv]
        tail = step.outputs[0]
        after = self.only_reader(tail)
        if after is not None and self.inference_norm(self.steps[after], tail):
            unit.append(after)
            tail = self.steps[after].outputs[0]
            after = self.only_reader(tail)
        silu = self.silu(tail)
        if silu is not None:
            unit += silu
        elif after is not None and _unary(self.steps[after], self.constants) is not None:
            unit.append(after)
        return unit

    def planar(self, conv: Step) -> bool:
        """A 2-D Conv, as far as its weight (when an initializer) and attributes tell: the
        fused call is 2-D; 1-D and 3-D ones run as nodes, without a group around them."""
        w = self.constants.get(conv.inputs[1])
        if w is not None and w.data.dim() != 4:
            return False
        lengths = {"kernel_shape": 2, "strides": 2, "dilations": 2, "pads": 4}
        return all(len(conv.attrs.get(k) or [0] * n) == n for k, n in lengths.items())

    def inference_norm(self, step: Step, x: str) -> bool:
        """An inference-form BatchNormalization of ``x`` (it still follows the training flag
        when run as a node) with known per-channel parameters."""
        return (
            step.info.op_type == "BatchNormalization"
            and step.info.domain == ""
            and len(step.outputs) == 1
            and len(step.inputs) == 5
            and step.inputs[0] == x
            and step.attrs.get("spatial", 1) == 1
            and not step.attrs.get("training_mode", 0)
            and all(self.weight(n) for n in step.inputs[1:])
        )

    def silu(self, tail: str) -> list[int] | None:
        """``Mul(t, Sigmoid(t))`` (either order) of ``tail``: the Sigmoid and Mul steps."""
        found = self.index.readers(tail)
        if len(found) != 2 or tail in self.index.outputs:
            return None
        kinds = {self.steps[i].info.op_type: i for i in found if self.steps[i].info.domain == ""}
        sig, mul = kinds.get("Sigmoid"), kinds.get("Mul")
        if sig is None or mul is None or len(self.steps[sig].outputs) != 1:
            return None
        sig_out = self.steps[sig].outputs[0]
        if sorted(self.steps[mul].inputs) != sorted([tail, sig_out]):
            return None
        if self.only_reader(sig_out) != mul or self.steps[sig].foldable:
            return None
        return [sig, mul]


def _unary(step: Step, constants: dict[str, Tensor]) -> Unary | None:
    """oneDNN's post-op (name, scalars) computing activation ``step``, None if none does."""
    op = step.info.op_type
    if step.info.domain != "" or len(step.outputs) != 1:
        return None
    simple = {"Relu": "relu", "HardSwish": "hardswish", "Sigmoid": "sigmoid"}
    if op in simple:
        return simple[op], []
    if op == "Clip":
        bounds = _clip_bounds(step, constants)
        return None if bounds is None else ("hardtanh", list(bounds))
    if op == "HardSigmoid":  # oneDNN's is torch's: alpha 1/6, beta 0.5 (ONNX's default is 0.2)
        alpha, beta = float(step.attrs.get("alpha", 0.2)), float(step.attrs.get("beta", 0.5))
        torch_like = math.isclose(alpha, 1 / 6, rel_tol=1e-6) and beta == 0.5
        return ("hardsigmoid", []) if torch_like else None
    if op == "LeakyRelu":
        return "leaky_relu", [float(step.attrs.get("alpha", 0.01))]
    return None


def _clip_bounds(step: Step, constants: dict[str, Tensor]) -> tuple[float, float] | None:
    """Clip's finite min and max: attributes before opset 11, constant inputs since."""
    if step.info.since_version < 11:
        lo, hi = step.attrs.get("min"), step.attrs.get("max")
    else:
        lo, hi = (_scalar_input(step, i, constants) for i in (1, 2))
    if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)) or lo > hi:
        return None
    return float(lo), float(hi)


def _scalar_input(step: Step, position: int, constants: dict[str, Tensor]) -> float | None:
    """A constant scalar input's value, read once (not a trainable one, which may change)."""
    if position >= len(step.inputs) or not step.inputs[position]:
        return None
    t = constants.get(step.inputs[position])
    if t is None or t.is_param or t.data.device.type == "meta" or t.data.numel() != 1:
        return None
    return float(t.data.reshape(())) if t.data.dtype.is_floating_point else None


class _Cache:
    """What a unit prepared from one state of its weights: the weight tensors and their
    versions, the weight and bias with BatchNormalization folded in (made at the first fused
    call), the weight packed for each image size (height, width) it was packed at, and the
    geometry of each input shape seen (None for a shape the fused call does not take), and
    the folded weight as a matrix for the one-pixel images of squeeze-and-excitation."""

    def __init__(self, state: list[tuple[torch.Tensor, int]]) -> None:
        self.state = state
        self.folded: tuple[torch.Tensor, torch.Tensor | None] | None = None
        self.matrix: torch.Tensor | None = None  # the folded weight as [in, out], if used
        self.packed: dict[torch.Size, torch.Tensor] = {}
        self.geometry: dict[torch.Size, Geometry | None] = {}

    def made_from(self, args: Sequence[torch.Tensor], positions: list[int]) -> bool:
        """Whether the weights are still these tensors, unchanged (an optimizer step or
        ``set_states`` bumps the version; ``load_states`` or a device move replaces them)."""
        for i, (t, version) in zip(positions, self.state, strict=True):
            if args[i] is not t or t._version != version:
                return False
        return True


class _Unit:
    """One Conv and the steps fused into it."""

    def __init__(self, indices: list[int], finder: _Finder, inputs: tuple[str, ...]) -> None:
        self.indices = indices
        self.steps = [finder.steps[i] for i in indices]
        conv = self.steps[0]
        self.op = conv.op
        self.x_name = conv.inputs[0]
        self.out_name = self.steps[-1].outputs[0]
        self.w = inputs.index(conv.inputs[1])
        self.b = inputs.index(conv.inputs[2]) if len(conv.inputs) > 2 and conv.inputs[2] else None
        norm = next((s for s in self.steps if s.info.op_type == "BatchNormalization"), None)
        self.norm = [inputs.index(n) for n in norm.inputs[1:]] if norm is not None else None
        self.eps = float(norm.attrs.get("epsilon", 1e-5)) if norm is not None else 0.0
        last = self.steps[-1]
        if last.info.op_type == "Mul":
            self.attr, self.scalars = "swish", []
        else:
            self.attr, self.scalars = _unary(last, finder.constants) or ("none", [])
        self.groups = int(conv.attrs.get("group", 1) or 1)
        self.strides = spatial_ints(conv.op, "strides", 2, 1)
        self.dilations = spatial_ints(conv.op, "dilations", 2, 1)
        self.weight_args = [self.w, *([] if self.b is None else [self.b]), *(self.norm or [])]
        self.name = (
            "Conv"
            + ("BatchNorm" if norm is not None else "")
            + ("" if self.attr == "none" else self.attr.title().replace("_", ""))
        )
        self._cache: _Cache | None = None

    def fused(self, x: torch.Tensor, args: Sequence[torch.Tensor]) -> torch.Tensor | None:
        """The unit's output by one oneDNN call (a matrix product for a one-pixel image) on
        CPU float32 input ``x``; None where the call does not apply (the caller then runs
        the steps).

        Concurrent runs (a server's workers) may share the unit: each reads the cache once
        into a local, and a stale one is replaced whole, never changed under a reader.
        """
        cache = self._cache
        if cache is None or not cache.made_from(args, self.weight_args):
            if not self._weights_fit(args):
                return None
            cache = self._cache = _Cache([(args[i], args[i]._version) for i in self.weight_args])
        geometry = cache.geometry.get(x.shape)
        if geometry is None:
            if x.shape in cache.geometry:
                return None
            if len(cache.geometry) >= _SHAPES_KEPT:
                cache.geometry.clear()
            geometry = cache.geometry[x.shape] = self._shape_geometry(x, args)
            if geometry is None:
                return None
        pads, widen, product = geometry
        folded = cache.folded
        if folded is None:
            folded = cache.folded = self._fold(args)
        w, b = folded
        if product:
            return self._product(x, w, b, cache)
        x = x.contiguous(memory_format=_CHANNELS_LAST)
        if widen is not None:
            x = F.pad(x, widen)
        size = x.shape[2:]
        packed = cache.packed.get(size)
        if packed is None and len(cache.packed) < _PACKS_KEPT:
            packed = cache.packed[size] = torch.ops.mkldnn._reorder_convolution_weight(
                w, pads, self.strides, self.dilations, self.groups, list(x.shape)
            )
        return torch.ops.mkldnn._convolution_pointwise(
            x, w if packed is None else packed, b, pads, self.strides, self.dilations,
            self.groups, self.attr, self.scalars, "",
        )  # fmt: skip

    def _weights_fit(self, args: Sequence[torch.Tensor]) -> bool:
        """CPU float32 dense weights of the shapes the fused call needs."""
        if any(
            args[i].dtype != torch.float32
            or args[i].device.type != "cpu"
            or args[i].layout != torch.strided
            for i in self.weight_args
        ):
            return False
        w = args[self.w]
        if w.dim() != 4 or w.shape[0] % self.groups:
            return False
        return all(args[i].shape == (w.shape[0],) for i in self.weight_args[1:])

    def _shape_geometry(self, x: torch.Tensor, args: Sequence[torch.Tensor]) -> Geometry | None:
        """The pads for input ``x`` (auto_pad resolved): symmetric ones for the convolution,
        asymmetric ones (SAME_UPPER with a stride, as TensorFlow exports) applied by ``F.pad``
        first, as the Conv node does; None where the shapes do not fit, which the node then
        reports."""
        w = args[self.w]
        if x.dim() != 4 or x.shape[1] != w.shape[1] * self.groups or x.layout != torch.strided:
            return None
        try:
            pads = forward_pads(
                self.op, list(x.shape[2:]), list(w.shape[2:]), self.strides, self.dilations
            )
        except Exception:
            return None  # a bad attribute: the node reports it
        if len(pads) != 4 or min(pads) < 0:
            return None
        for i in range(2):
            span = (w.shape[2 + i] - 1) * self.dilations[i] + 1
            if x.shape[2 + i] + pads[i] + pads[2 + i] < span:
                return None
        if pads[:2] == pads[2:]:
            return pads[:2], None, one_point(x, w) and self.groups == 1 and not any(pads)
        return [0, 0], torch_pad(pads[:2], pads[2:]), False

    def _product(
        self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, cache: _Cache
    ) -> torch.Tensor:
        """A 1x1 convolution of a one-pixel image (a squeeze-and-excitation's) as the matrix
        product it is, with the post-op after it: setting up a oneDNN convolution costs about
        50 us per call, the product of these few thousand values a few (MobileNet-v3's 16
        such convs at batch 1: 0.7-0.8 ms of a 19-20 ms eager run). The folded weight is kept
        as an [in, out] matrix: ``addmm`` on it took 10-25 % less than ``F.linear`` on the
        [out, in] weight at these sizes, which the Conv operator's own product
        (``conv._as_product``), having no cache to keep a copy in, computes instead."""
        if cache.matrix is None:
            cache.matrix = w.reshape(w.shape[0], -1).t().contiguous()
        rows = x.reshape(x.shape[0], -1)
        y = torch.mm(rows, cache.matrix) if b is None else torch.addmm(b, rows, cache.matrix)
        return _POST_OPS[self.attr](y, *self.scalars).reshape(*y.shape, 1, 1)

    def _fold(self, args: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The weight and bias with BatchNormalization folded in (in float64)."""
        w = args[self.w]
        b = None if self.b is None else args[self.b]
        if self.norm is not None:
            scale, shift, mean, var = (args[i].double() for i in self.norm)
            factor = scale * torch.rsqrt(var + self.eps)
            base = torch.zeros_like(mean) if b is None else b.double()
            b = ((base - mean) * factor + shift).float()
            w = (w.double() * factor.reshape(-1, 1, 1, 1)).float()
        return w.contiguous(), b


class ConvChain:
    """Computes a group from the tensors of its inputs, unit by unit, each by its fused call
    (see the module's docstring); declines (None) where a unit's call does not apply, and the
    executor then runs the group's steps."""

    def __init__(self, units: list[_Unit], inputs: tuple[str, ...]):
        self.units = units
        self.inputs = inputs
        self.x = inputs.index(units[0].x_name)
        self.name = "+".join(u.name for u in units)

    def __call__(self, *args: torch.Tensor) -> torch.Tensor | None:
        y = args[self.x]
        if not (
            _MKLDNN
            and y.dtype == torch.float32
            and y.device.type == "cpu"
            and not torch.is_grad_enabled()
            and not is_training()
            and value_checks()
        ):
            return None
        for unit in self.units:
            y = unit.fused(y, args)
            if y is None:
                return None
        return y
