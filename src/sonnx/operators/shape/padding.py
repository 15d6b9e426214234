"""Operators that grow or crop a tensor to a size: Pad (constant, reflect, edge and wrap modes;
negative pads crop) and CenterCropPad. The operators that cut, join or pick are in
:mod:`sonnx.operators.shape.slicing`.

Both are built from torch's ``pad``, ``narrow`` and ``index_select``, which work for every
dtype torch holds and carry gradients through torch autograd.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch.nn import functional

from sonnx.engine.host_values import host
from sonnx.engine.memory_guard import check_shape
from sonnx.engine.operator import Operator, OutputShape, host_ints
from sonnx.engine.tracing import value_checks
from sonnx.errors import BadInputError, ExportError
from sonnx.operators.shape.common import (
    as_int_list,
    constant_input,
    int64_input,
    ints_for_attribute,
    normalize_axes,
    require_opset,
)
from sonnx.tensor import Tensor

if TYPE_CHECKING:
    from sonnx.proto.graph_builder import GraphBuilder

__all__ = ["CenterCropPad", "Pad", "center_crop_pad", "pad"]


def _pad_index(n: int, begin: int, end: int, mode: str, device: torch.device) -> torch.Tensor:
    """Source positions along one axis for reflect/edge/wrap padding of a length-n axis.

    Outside graph tracing, made once per geometry: five small torch calls otherwise cost more
    than the ``index_select`` itself (the pads torch's own kernels do not compute, see
    :func:`_torch_pad`, run at every call of a model).
    """
    if not value_checks() or not all(type(v) is int for v in (n, begin, end)):
        return _new_pad_index(n, begin, end, mode, device)
    return _kept_pad_index(n, begin, end, mode, device)


@lru_cache(maxsize=256)
def _kept_pad_index(n: int, begin: int, end: int, mode: str, device: torch.device) -> torch.Tensor:
    return _new_pad_index(n, begin, end, mode, device)


def _new_pad_index(n: int, begin: int, end: int, mode: str, device: torch.device) -> torch.Tensor:
    pos = torch.arange(-begin, n + end, device=device)
    if mode == "edge":
        return pos.clamp(0, n - 1)
    if mode == "wrap":
        return pos.remainder(n)
    if n == 1:
        return torch.zeros_like(pos)
    period = 2 * (n - 1)
    m = pos.abs().remainder(period)
    return torch.where(m < n, m, period - m)


#: Element types torch's reflection and replication pads take.
_TORCH_PAD_TYPES = frozenset(
    {torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.uint8, torch.int8,
     torch.int16, torch.int32, torch.int64}
)  # fmt: skip


def _torch_pad(
    x: torch.Tensor, begins: list[int], ends: list[int], mode: str
) -> tuple[str, list[int]] | None:
    """torch's own kernel for a reflect or edge pad, and its pads (last axis first), where it
    computes the ONNX one (several times faster than ``index_select`` along a last axis): at
    most the last three axes padded, one or two axes before them, fixed sizes, each reflect pad
    shorter than its axis (ONNX reflects again beyond that, torch refuses)."""
    padded = [a for a in builtins.range(x.dim()) if begins[a] or ends[a]]
    if mode not in ("reflect", "edge") or not padded or x.dtype not in _TORCH_PAD_TYPES:
        return None
    first = padded[0]
    trailing = x.dim() - first
    if trailing > 3 or x.dim() - trailing not in (1, 2):
        return None
    if not all(type(n) is int and n > 0 for n in x.shape[first:]):
        return None
    if mode == "reflect" and any(
        max(begins[a], ends[a]) >= x.shape[a] for a in builtins.range(first, x.dim())
    ):
        return None
    return ("reflect" if mode == "reflect" else "replicate"), _torch_pads(begins, ends, first)


def _torch_pads(begins: list[int], ends: list[int], first: int = 0) -> list[int]:
    """``functional.pad``'s pad list for axes ``first`` on: last axis first, begin then end."""
    return [p for a in reversed(builtins.range(first, len(begins))) for p in (begins[a], ends[a])]


def full_rank_pads(pads: list[int], axes: list[int] | None, rank: int, op: str) -> list[int]:
    """ONNX pads ``[b_axes..., e_axes...]`` over ``axes`` expanded to every axis."""
    axes = list(builtins.range(rank)) if axes is None else normalize_axes(op, axes, rank)
    if len(pads) != 2 * len(axes):
        raise BadInputError(
            f"{op}: pads must hold 2 values per padded axis ({2 * len(axes)}), received {pads}"
        )
    full = [0] * (2 * rank)
    for i, a in enumerate(axes):
        full[a], full[rank + a] = pads[i], pads[len(axes) + i]
    return full


class Pad(Operator):
    """Pad (or crop, for negative pads) every axis; modes constant, reflect, edge, wrap."""

    op_type = "Pad"
    since_versions = (11, 13, 18, 19, 21, 23, 24, 25)
    output_shape = OutputShape.FROM_SHAPES
    # Strings, which ONNX lets in, are refused: a constant pad needs a string constant.
    moves_elements_only = False
    shape_inputs = frozenset({1, 3})
    # Pads computed from a shape (VITS's relative attention pads a learned table by the length
    # minus its window) stay symbolic in a trace, so one graph serves every length.
    size_inputs = frozenset({1, 3})
    # pads, the constant value and axes.
    parameterising_inputs = frozenset({1, 2, 3})

    def forward(
        self,
        x: torch.Tensor,
        pads: torch.Tensor,
        constant_value: torch.Tensor | None = None,
        axes: torch.Tensor | None = None,
    ) -> torch.Tensor:
        mode = self.attr("mode") or "constant"
        modes = (
            ("constant", "reflect", "edge")
            if self.version and self.version < 19
            else ("constant", "reflect", "edge", "wrap")
        )
        if mode not in modes:
            raise BadInputError(f"Pad: mode must be one of {modes}, received {mode!r}")
        rank = x.dim()
        full = full_rank_pads(host_ints(pads), host_ints(axes), rank, "Pad")
        begins, ends = full[:rank], full[rank:]
        for a in builtins.range(rank):
            if begins[a] < 0 or ends[a] < 0:
                first, last = max(-begins[a], 0), max(-ends[a], 0)
                x = x.narrow(a, first, max(x.shape[a] - first - last, 0))
        begins, ends = [max(b, 0) for b in begins], [max(e, 0) for e in ends]
        out = [n + b + e for n, b, e in zip(x.shape, begins, ends, strict=True)]
        check_shape("Pad: output", out, x.dtype, x.device)
        if mode == "constant":
            value = 0 if constant_value is None else host(constant_value).reshape(-1)[0].item()
            return functional.pad(x, _torch_pads(begins, ends), value=value) if rank else x.clone()
        by_torch = _torch_pad(x, begins, ends, mode)
        if by_torch is not None:
            torch_mode, flat = by_torch
            return functional.pad(x, flat, mode=torch_mode)
        for a in builtins.range(rank):
            if begins[a] or ends[a]:
                if x.shape[a] == 0:
                    raise BadInputError(
                        f"Pad: mode {mode!r} cannot pad axis {a} of size 0 "
                        f"(input shape {tuple(x.shape)})"
                    )
                idx = _pad_index(x.shape[a], begins[a], ends[a], mode, x.device)
                x = x.index_select(a, idx)
        return x

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        mode = self.attr("mode") or "constant"
        if mode == "wrap":
            require_opset(g, "Pad", 19, "mode 'wrap'")
        has_axes = len(inputs) > 3 and inputs[3] != ""
        if g.opset >= 18 or (g.opset >= 11 and not has_axes):
            super().export(g, inputs, outputs)
            return
        rank = self.inputs[0].ndim()
        pads = constant_input(self, 1)
        axes = ints_for_attribute(self, 3, "axes", g, 18) if has_axes else None
        if g.opset >= 11:
            if pads is None:
                raise ExportError(
                    f"Pad: an axes input exists only from opset 18, and the pads of this graph "
                    f"are computed at run time; cannot export at opset {g.opset}"
                )
            full = full_rank_pads(host_ints(pads), axes, rank, "Pad")
            g.add_node(
                "Pad",
                [inputs[0], g.constant(full, "pads", np.int64), *inputs[2:3]],
                outputs,
                mode=mode,
            )
            return
        full = full_rank_pads(ints_for_attribute(self, 1, "pads", g, 11), axes, rank, "Pad")
        value = 0.0
        if len(inputs) > 2 and inputs[2] != "":
            constant = constant_input(self, 2)
            if constant is None:
                raise ExportError(
                    f"Pad: at opset {g.opset} the pad value must be an attribute, but this "
                    "graph computes it at run time; export at opset 11 or later"
                )
            value = float(host(constant).reshape(-1)[0].item())
        name = "pads" if g.opset >= 2 else "paddings"
        g.add_node("Pad", inputs[:1], outputs, mode=mode, value=value, **{name: full})


class CenterCropPad(Operator):
    """Crop or zero-pad ``axes`` (default all) to ``shape`` around the centre."""

    op_type = "CenterCropPad"
    since_versions = (18,)
    output_shape = OutputShape.FROM_SHAPES
    moves_elements_only = True
    shape_inputs = frozenset({1})
    parameterising_inputs = frozenset({1})

    def forward(self, x: torch.Tensor, shape: torch.Tensor) -> torch.Tensor:
        target = host_ints(shape)
        axes = self.attr("axes")
        axes = list(builtins.range(x.dim())) if axes is None else axes
        axes = normalize_axes("CenterCropPad", axes, x.dim())
        if len(target) != len(axes) or any(t < 0 for t in target):
            raise BadInputError(
                f"CenterCropPad: shape must hold one non-negative size per axis {axes}, "
                f"received {target}"
            )
        pads = [0] * (2 * x.dim())
        for a, size in zip(axes, target, strict=True):
            dim = x.shape[a]
            if size < dim:
                x = x.narrow(a, (dim - size) // 2, size)
            elif size > dim:
                extra = size - dim
                pads[2 * (x.dim() - 1 - a)] = extra // 2
                pads[2 * (x.dim() - 1 - a) + 1] = extra - extra // 2
        return functional.pad(x, pads) if any(pads) else x


# ---- SINGA-named functions -------------------------------------------------------------------


def pad(
    x: Tensor,
    mode: str = "constant",
    pads: Sequence[int] | Tensor = (),
    constant: float = 0.0,
) -> Tensor:
    """Pad ``x``: ``pads`` is ONNX's ``[begin_0, ..., begin_n, end_0, ..., end_n]`` (ONNX ``Pad``).

    :param x: the tensor to pad.
    :param mode: ``"constant"``, ``"reflect"``, ``"edge"`` or ``"wrap"``.
    :param pads: the amount to add before and after each axis (negative crops).
    :param constant: the fill value for ``mode="constant"``.
    :returns: the padded tensor, of ``x``'s dtype.
    :raises BadInputError: ``pads`` does not hold two values per axis, ``mode`` is unknown, or a
        mode that copies values pads an axis of size 0.
    """
    if not isinstance(pads, Tensor) and len(as_int_list(pads)) != 2 * x.ndim():
        raise BadInputError(
            f"pad: pads must hold {2 * x.ndim()} values (begins then ends for each axis of "
            f"shape {x.shape}), received {list(pads)}"
        )
    value = None
    if mode == "constant":
        value = Tensor(
            data=torch.tensor(constant, dtype=x.dtype), device=x.device, requires_grad=False
        )
    return Pad(mode=mode)(x, int64_input(pads, x), value)


def center_crop_pad(x: Tensor, shape: Sequence[int], axes: Sequence[int] | None = None) -> Tensor:
    """Crop or pad ``x`` around its centre to ``shape`` (ONNX ``CenterCropPad``; pads with zeros).

    :param x: the tensor to crop or pad.
    :param shape: the target size of each axis in ``axes``.
    :param axes: the axes ``shape`` applies to; None for every axis.
    :returns: a tensor of ``x``'s dtype with the target sizes.
    :raises BadInputError: ``shape`` does not hold one non-negative size per axis.
    """
    attrs = {} if axes is None else {"axes": as_int_list(axes)}
    return CenterCropPad(**attrs)(x, int64_input(shape, x))
