"""Operators that rearrange a tensor's elements without changing them: Reshape, Flatten,
Transpose, Squeeze, Unsqueeze, Expand, Tile, Identity, DepthToSpace, SpaceToDepth.

Each is one torch view or copy (reshape, permute, expand, repeat), so torch autograd gives the
gradients and every dtype torch holds works, bool and zero-size tensors included.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from sonnx.engine.memory_guard import check_shape
from sonnx.engine.operator import Operator, OutputShape, host_ints
from sonnx.engine.singa_functions import (
    Input,
    Keyword,
    SingaFunction,
)
from sonnx.engine.tracing import value_checks
from sonnx.errors import BadInputError, ExportError, OpsetTooOldError
from sonnx.operators.elementwise.base import broadcast_shapes
from sonnx.operators.shape.common import (
    as_int_list,
    attrs_without,
    int64_input,
    ints_for_attribute,
    normalize_axes,
)
from sonnx.symbolic_sizes import has_symbols, viewable
from sonnx.tensor import Tensor

if TYPE_CHECKING:
    from sonnx.proto.graph_builder import GraphBuilder

__all__ = [
    "DepthToSpace",
    "Expand",
    "Flatten",
    "Identity",
    "Reshape",
    "SpaceToDepth",
    "Squeeze",
    "Tile",
    "Transpose",
    "Unsqueeze",
    "depth_to_space",
    "expand",
    "flatten",
    "identity",
    "reshape",
    "space_to_depth",
    "squeeze",
    "tile",
    "transpose",
    "unsqueeze",
]


class Reshape(Operator):
    """``shape`` may hold one -1 (inferred) and 0s (copy the input's dim; a literal 0 when
    ``allowzero=1``, opset 14+)."""

    op_type = "Reshape"
    since_versions = (5, 13, 14, 19, 21, 23, 24, 25)
    output_shape = OutputShape.FROM_SHAPES
    moves_elements_only = True
    shape_inputs = frozenset({1})
    size_inputs = frozenset({1})
    parameterising_inputs = frozenset({1})
    # The last target resolved, with what it was resolved from: (the input's sizes, the shape
    # tensor, its version, the target). An imported graph hands a Reshape the same shape
    # tensor (a constant, or a shape value of the input signature) at every run.
    _resolved: tuple[Any, torch.Tensor, int, list[int]] | None = None

    def forward(self, x: torch.Tensor, shape: torch.Tensor) -> torch.Tensor:
        last = self._resolved
        if (
            last is not None
            and value_checks()  # first: sizes traced as symbols must not meet a comparison
            and last[1] is shape
            and last[2] == shape._version
            and last[0] == x.shape
        ):
            return x.reshape(last[3])
        target = self._target(x, shape)
        try:
            y = viewable(x).reshape(target)
        except RuntimeError:
            raise BadInputError(
                f"Reshape: cannot reshape input of shape {tuple(x.shape)} ({x.numel()} elements) "
                f"to {target}"
            ) from None
        if value_checks() and isinstance(shape, torch.Tensor):
            self._resolved = (x.shape, shape, shape._version, target)
        return y

    def _target(self, x: torch.Tensor, shape: torch.Tensor) -> list[int]:
        """The sizes ``shape`` asks for, 0s copied from ``x`` unless ``allowzero``; checked."""
        target = host_ints(shape)
        if not self.attr("allowzero"):
            for i, d in enumerate(target):
                if d == 0:
                    if i >= x.dim():
                        raise BadInputError(
                            f"Reshape: shape[{i}] is 0 (copy the input's dim {i}) but the input "
                            f"has only {x.dim()} dims, received shape {target}"
                        )
                    target[i] = x.shape[i]
        if target.count(-1) > 1 or any(d < -1 for d in target):
            raise BadInputError(
                f"Reshape: shape may hold at most one -1 and no other negative value, "
                f"received {target}"
            )
        if -1 in target and has_symbols([*x.shape, *target]):
            _infer_a_computed_one(x, target)
        return target

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        if g.opset >= 14:
            super().export(g, inputs, outputs)
            return
        if self.attr("allowzero"):
            shape = ints_for_attribute(self, 1, "shape", g, 5)
            if shape is None or 0 in shape:
                raise OpsetTooOldError(
                    f"Reshape: allowzero=1 with a 0 in shape needs opset 14; cannot export at "
                    f"opset {g.opset}",
                    14,
                )
        if g.opset >= 5:
            g.add_node("Reshape", inputs, outputs)
            return
        g.add_node("Reshape", inputs[:1], outputs, shape=ints_for_attribute(self, 1, "shape", g, 5))


def _infer_a_computed_one(x: torch.Tensor, target: list[Any]) -> None:
    """Write 1 for ``target``'s -1 where, in a trace with symbolic sizes, the size it stands
    for is an expression of them that is 1 in the trace (guarding that it is).

    torch would infer it as that expression, e.g. ``(s1 * 4) // (s0 * 4)`` for a per-step
    scalar reshaped along another input's batch: 1 whenever the two batches agree, but not
    recognisably 1. inductor, asked whether it is 1 under ``backed_size_oblivious``, answers no
    and indexes the tensor along it where it should broadcast it: the compiled graph's results
    were garbage where eager's were right. A bare symbol (an input's own dimension, a batch of
    one in the trace) is left to torch, so the graph stays general in it.
    """
    axis = target.index(-1)
    rest = math.prod(d for i, d in enumerate(target) if i != axis)
    if not isinstance(rest, torch.SymInt) and rest == 0:
        return  # torch's own error for a -1 beside a 0
    inferred = x.numel() // rest
    if (
        isinstance(inferred, torch.SymInt)
        and not inferred.node.expr.is_Symbol
        and inferred.node.hint == 1
        and inferred == 1  # guards it
    ):
        target[axis] = 1


class Flatten(Operator):
    """2-D result: dims before ``axis`` form the rows, the rest the columns."""

    op_type = "Flatten"
    since_versions = (1, 9, 11, 13, 21, 23, 24, 25)
    output_shape = OutputShape.FROM_SHAPES
    moves_elements_only = True

    singa_functions = (
        SingaFunction(
            "flatten",
            "``x`` as a 2-D tensor: the axes before ``axis`` make the rows, the rest the columns.",
            inputs=(Input("x", "the tensor to flatten."),),
            returns="a 2-D tensor with ``x``'s elements (ONNX ``Flatten``).",
            keywords=(Keyword("axis", "where to cut, in [-rank, rank]."),),
            raises=(("BadInputError", "``axis`` is out of range."),),
        ),
    )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        axis = self.attr("axis")
        rank = x.dim()
        if not -rank <= axis <= rank:
            raise BadInputError(
                f"Flatten: axis must be in [{-rank}, {rank}] for a {rank}-D input, received {axis}"
            )
        axis = axis + rank if axis < 0 else axis
        shape = tuple(x.shape)
        return viewable(x).reshape(math.prod(shape[:axis]), math.prod(shape[axis:]))


class Transpose(Operator):
    """Permute the axes by ``perm`` (default: reverse them)."""

    op_type = "Transpose"
    since_versions = (1, 13, 21, 23, 24, 25)
    output_shape = OutputShape.FROM_SHAPES
    moves_elements_only = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        perm = self.attr("perm")
        if perm is None:
            return x.permute(*reversed(range(x.dim())))
        perm = list(perm)
        if sorted(perm) != list(range(x.dim())):
            raise BadInputError(
                f"Transpose: perm must be a permutation of 0..{x.dim() - 1} for a {x.dim()}-D "
                f"input, received {perm}"
            )
        return x.permute(*perm)


class Squeeze(Operator):
    """Remove size-1 axes: those listed in ``axes`` (an input from opset 13), else all."""

    op_type = "Squeeze"
    since_versions = (13, 21, 23, 24, 25)
    output_shape = OutputShape.FROM_SHAPES
    moves_elements_only = True
    shape_inputs = frozenset({1})
    size_inputs = frozenset({1})
    parameterising_inputs = frozenset({1})

    def forward(self, x: torch.Tensor, axes: torch.Tensor | None = None) -> torch.Tensor:
        listed = host_ints(axes)
        if not listed:
            return x.reshape([d for d in x.shape if d != 1])
        dims = normalize_axes("Squeeze", listed, x.dim())
        bad = [a for a in dims if x.shape[a] != 1]
        if bad:
            raise BadInputError(
                f"Squeeze: axes {bad} of input with shape {tuple(x.shape)} do not have size 1"
            )
        return x.reshape([d for i, d in enumerate(x.shape) if i not in dims])

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        if g.opset >= 13:
            super().export(g, inputs, outputs)
            return
        axes = ints_for_attribute(self, 1, "axes", g, 13)
        g.add_node("Squeeze", inputs[:1], outputs, **({} if axes is None else {"axes": axes}))


class Unsqueeze(Operator):
    """Insert size-1 axes at ``axes`` (positions in the output; an input from opset 13)."""

    op_type = "Unsqueeze"
    since_versions = (13, 21, 23, 24, 25)
    output_shape = OutputShape.FROM_SHAPES
    moves_elements_only = True
    shape_inputs = frozenset({1})
    size_inputs = frozenset({1})
    parameterising_inputs = frozenset({1})

    def forward(self, x: torch.Tensor, axes: torch.Tensor) -> torch.Tensor:
        listed = host_ints(axes)
        out_rank = x.dim() + len(listed)
        dims = set(normalize_axes("Unsqueeze", listed, out_rank))
        rest = iter(x.shape)
        return viewable(x).reshape([1 if i in dims else next(rest) for i in range(out_rank)])

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        if g.opset >= 13:
            super().export(g, inputs, outputs)
            return
        axes = ints_for_attribute(self, 1, "axes", g, 13)
        g.add_node("Unsqueeze", inputs[:1], outputs, axes=axes)


class Expand(Operator):
    """Broadcast ``x`` and ``shape`` against each other (a dim of 1 in ``shape`` keeps x's)."""

    op_type = "Expand"
    since_versions = (8, 13)
    output_shape = OutputShape.FROM_SHAPES
    moves_elements_only = True
    shape_inputs = frozenset({1})
    size_inputs = frozenset({1})
    parameterising_inputs = frozenset({1})

    def forward(self, x: torch.Tensor, shape: torch.Tensor) -> torch.Tensor:
        target = host_ints(shape)
        try:
            out = broadcast_shapes(tuple(x.shape), tuple(target))
        except RuntimeError:
            raise BadInputError(
                f"Expand: input of shape {tuple(x.shape)} cannot be broadcast with shape {target}"
            ) from None
        # A view, but whatever reads it next materializes it: refuse a huge one here.
        check_shape("Expand: output", out, x.dtype, x.device)
        return x.expand(out)


class Tile(Operator):
    """Repeat ``x`` ``repeats[i]`` times along axis i (one repeat count per axis)."""

    op_type = "Tile"
    since_versions = (6, 13)
    output_shape = OutputShape.FROM_SHAPES
    moves_elements_only = True
    # The repeats (Tile-1: the tiles and the axis, inputs 1 and 2).
    shape_inputs = frozenset({1, 2})
    size_inputs = frozenset({1})
    parameterising_inputs = frozenset({1, 2})

    def forward(self, x: torch.Tensor, repeats: torch.Tensor) -> torch.Tensor:
        reps = host_ints(repeats)
        if len(reps) != x.dim() or any(r < 0 for r in reps):
            raise BadInputError(
                f"Tile: repeats must hold {x.dim()} non-negative counts (one per axis of the "
                f"input of shape {tuple(x.shape)}), received {reps}"
            )
        if x.dim() == 0:
            return x.clone()
        out = [n * r for n, r in zip(x.shape, reps, strict=True)]
        check_shape("Tile: output", out, x.dtype, x.device)
        return x.repeat(*reps)


class Identity(Operator):
    """The input itself (a new autograd view, so gradients pass through)."""

    op_type = "Identity"
    output_shape = OutputShape.FROM_SHAPES
    moves_elements_only = True

    singa_functions = (
        SingaFunction(
            "identity",
            (
                "The input itself (a new autograd view, so gradients pass through; ONNX "
                "``Identity``)."
            ),
            inputs=(Input("x", "any tensor."),),
            returns="a tensor with ``x``'s values.",
        ),
    )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.view_as(x)


def _block_input(op: str, x: torch.Tensor, blocksize: int | None) -> tuple[int, ...]:
    if blocksize is None or blocksize < 1:
        raise BadInputError(f"{op}: blocksize must be a positive int, received {blocksize}")
    if x.dim() != 4:
        raise BadInputError(
            f"{op}: input must be 4-D (N, C, H, W), received shape {tuple(x.shape)}"
        )
    return tuple(x.shape)


def _check_mode(op: str, mode: str) -> str:
    if mode not in ("DCR", "CRD"):
        raise BadInputError(f"{op}: mode must be 'DCR' or 'CRD', received {mode!r}")
    return mode


class DepthToSpace(Operator):
    """Move ``blocksize**2`` channel groups into spatial blocks (DCR or CRD channel order)."""

    op_type = "DepthToSpace"
    since_versions = (1, 11, 13, 28)
    output_shape = OutputShape.FROM_SHAPES
    moves_elements_only = True

    singa_functions = (
        SingaFunction(
            "depth_to_space",
            (
                "Move channels into ``blocksize`` x ``blocksize`` spatial blocks (ONNX "
                "``DepthToSpace``)."
            ),
            inputs=(Input("x", "a 4-D (N, C, H, W) tensor, C a multiple of ``blocksize ** 2``."),),
            returns="a (N, C / blocksize**2, H * blocksize, W * blocksize) tensor.",
            keywords=(
                Keyword("blocksize", "the block's side."),
                Keyword(
                    "mode",
                    '``"DCR"`` (depth, column, row) or ``"CRD"`` (column, row, depth) order.',
                ),
            ),
            raises=(
                (
                    "BadInputError",
                    (
                        "``x`` is not 4-D, ``blocksize`` is not positive, C is not a multiple of "
                        "``blocksize ** 2``, or ``mode`` is neither value."
                    ),
                ),
            ),
        ),
    )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bs = self.attr("blocksize")
        b, c, h, w = _block_input("DepthToSpace", x, bs)
        if c % (bs * bs):
            raise BadInputError(
                f"DepthToSpace: channels must be a multiple of blocksize**2 = {bs * bs}, "
                f"received input of shape {(b, c, h, w)}"
            )
        d = c // (bs * bs)
        if _check_mode("DepthToSpace", self.attr("mode") or "DCR") == "DCR":
            y = x.reshape(b, bs, bs, d, h, w).permute(0, 3, 4, 1, 5, 2)
        else:
            y = x.reshape(b, d, bs, bs, h, w).permute(0, 1, 4, 2, 5, 3)
        return y.reshape(b, d, h * bs, w * bs)

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        _export_block_op(self, g, inputs, outputs, mode_since=11)


class SpaceToDepth(Operator):
    """Move spatial ``blocksize`` x ``blocksize`` blocks into channels (inverse of
    DepthToSpace; ``mode`` from opset 28)."""

    op_type = "SpaceToDepth"
    since_versions = (1, 13, 28)
    output_shape = OutputShape.FROM_SHAPES
    moves_elements_only = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bs = self.attr("blocksize")
        b, c, h, w = _block_input("SpaceToDepth", x, bs)
        if h % bs or w % bs:
            raise BadInputError(
                f"SpaceToDepth: height and width must be multiples of blocksize {bs}, "
                f"received input of shape {(b, c, h, w)}"
            )
        y = x.reshape(b, c, h // bs, bs, w // bs, bs)
        if _check_mode("SpaceToDepth", self.attr("mode") or "DCR") == "DCR":
            y = y.permute(0, 3, 5, 1, 2, 4)
        else:
            y = y.permute(0, 1, 3, 5, 2, 4)
        return y.reshape(b, c * bs * bs, h // bs, w // bs)

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        _export_block_op(self, g, inputs, outputs, mode_since=28)


def _export_block_op(
    op: Operator, g: GraphBuilder, inputs: list[str], outputs: list[str], mode_since: int
) -> None:
    """Below the opset that introduced ``mode`` only DCR exists: drop it or refuse CRD."""
    if g.opset >= mode_since:
        Operator.export(op, g, inputs, outputs)
        return
    if (op.attr("mode") or "DCR") != "DCR":
        raise ExportError(
            f"{op.op_type}: mode 'CRD' exists only from opset {mode_since}; cannot export at "
            f"opset {g.opset}"
        )
    g.add_node(op.op_type, inputs, outputs, **attrs_without(op.attrs, "mode"))


# ---- SINGA-named functions -------------------------------------------------------------------


def reshape(x: Tensor, shape: Sequence[int] | Tensor) -> Tensor:
    """``x`` with a new shape (0 copies the input's dim, one -1 is inferred; ONNX ``Reshape``).

    :param x: the tensor to reshape.
    :param shape: the new shape: a sequence of ints or an int64 tensor.
    :returns: a tensor with ``x``'s elements in ``shape``.
    :raises BadInputError: the element counts differ, or ``shape`` holds more than one -1 or
        another negative value.
    """
    return Reshape()(x, int64_input(shape, x))


def transpose(x: Tensor, perm: Sequence[int] | None = None) -> Tensor:
    """Permute the axes (reverse them when ``perm`` is None; ONNX ``Transpose``).

    :param x: the tensor to transpose.
    :param perm: output axis ``i`` is input axis ``perm[i]``.
    :returns: a tensor with ``x``'s elements, axes permuted.
    :raises BadInputError: ``perm`` is not a permutation of ``x``'s axes.
    """
    return Transpose(**({} if perm is None else {"perm": as_int_list(perm)}))(x)


def squeeze(x: Tensor, axis: int | Sequence[int] | None = None) -> Tensor:
    """Remove size-1 axes: those in ``axis``, or all of them (ONNX ``Squeeze``).

    :param x: the tensor to squeeze.
    :param axis: an axis or axes to remove (negative counts from the end); None for every size-1
        axis.
    :returns: a tensor with ``x``'s elements and fewer axes.
    :raises BadInputError: an axis named does not have size 1.
    """
    return Squeeze()(x, int64_input(axis, x))


def unsqueeze(x: Tensor, axis: int | Sequence[int]) -> Tensor:
    """Insert size-1 axes at ``axis`` (positions in the result; ONNX ``Unsqueeze``).

    :param x: the tensor to extend.
    :param axis: an axis or axes of the result to insert.
    :returns: a tensor with ``x``'s elements and more axes.
    :raises BadInputError: an axis is out of range or repeated.
    """
    return Unsqueeze()(x, int64_input(axis, x))


def expand(x: Tensor, shape: Sequence[int] | Tensor) -> Tensor:
    """Broadcast ``x`` and ``shape`` against each other (ONNX ``Expand``).

    :param x: the tensor to expand.
    :param shape: the shape to broadcast with (a dim of 1 keeps ``x``'s dim).
    :returns: a tensor of the broadcast shape and ``x``'s dtype.
    :raises BadInputError: ``x``'s shape does not broadcast with ``shape``.
    """
    return Expand()(x, int64_input(shape, x))


def tile(x: Tensor, repeats: int | Sequence[int] | Tensor) -> Tensor:
    """Repeat ``x`` along each axis; as in ``numpy.tile`` a shorter ``repeats`` is padded with
    leading 1s (an int repeats the last axis).

    :param x: the tensor to repeat.
    :param repeats: the count per axis: an int, a sequence of ints or an int64 tensor with one
        count per axis.
    :returns: a tensor of ``x``'s dtype whose dims are ``x``'s times the counts (ONNX ``Tile``).
    :raises BadInputError: ``repeats`` holds more counts than ``x`` has axes, or a negative count.
    """
    if not isinstance(repeats, Tensor):
        reps = as_int_list(repeats)
        if len(reps) > x.ndim():
            raise BadInputError(
                f"tile: repeats may hold at most {x.ndim()} counts for an input of shape "
                f"{x.shape}, received {reps}"
            )
        repeats = [1] * (x.ndim() - len(reps)) + reps
    return Tile()(x, int64_input(repeats, x))


def space_to_depth(x: Tensor, blocksize: int, mode: str = "DCR") -> Tensor:
    """Move spatial ``blocksize`` x ``blocksize`` blocks into channels (ONNX ``SpaceToDepth``).

    :param x: a 4-D (N, C, H, W) tensor, H and W multiples of ``blocksize``.
    :param blocksize: the block's side.
    :param mode: ``"DCR"`` or ``"CRD"`` order (other than DCR needs opset 28 on export).
    :returns: a (N, C * blocksize**2, H / blocksize, W / blocksize) tensor.
    :raises BadInputError: ``x`` is not 4-D, ``blocksize`` is not positive, H or W is not a
        multiple of it, or ``mode`` is neither value.
    """
    attrs: dict[str, Any] = {"blocksize": blocksize}
    if mode != "DCR":
        attrs["mode"] = mode
    return SpaceToDepth(**attrs)(x)


# ---- SINGA-named functions, generated by `python -m sonnx.operators.singa_codegen` ----
# from the classes' ``singa_functions`` declarations: edit those, then run the command.


def flatten(x: Tensor, axis: int = 1) -> Tensor:
    """``x`` as a 2-D tensor: the axes before ``axis`` make the rows, the rest the columns.

    :param x: the tensor to flatten.
    :param axis: where to cut, in [-rank, rank].
    :returns: a 2-D tensor with ``x``'s elements (ONNX ``Flatten``).
    :raises BadInputError: ``axis`` is out of range.
    """
    return Flatten(axis=axis)(x)


def identity(x: Tensor) -> Tensor:
    """The input itself (a new autograd view, so gradients pass through; ONNX ``Identity``).

    :param x: any tensor.
    :returns: a tensor with ``x``'s values.
    """
    return Identity()(x)


def depth_to_space(x: Tensor, blocksize: int, mode: str = "DCR") -> Tensor:
    """Move channels into ``blocksize`` x ``blocksize`` spatial blocks (ONNX ``DepthToSpace``).

    :param x: a 4-D (N, C, H, W) tensor, C a multiple of ``blocksize ** 2``.
    :param blocksize: the block's side.
    :param mode: ``"DCR"`` (depth, column, row) or ``"CRD"`` (column, row, depth) order.
    :returns: a (N, C / blocksize**2, H * blocksize, W * blocksize) tensor.
    :raises BadInputError: ``x`` is not 4-D, ``blocksize`` is not positive, C is not a multiple of
        ``blocksize ** 2``, or ``mode`` is neither value.
    """
    return DepthToSpace(blocksize=blocksize, mode=mode)(x)
