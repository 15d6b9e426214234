"""Turning whatever a running node raises into a sonnx error that names the node.

A converter or operator checks what it can and raises a :class:`~sonnx.errors.SonnxError`;
anything else it raises (a ``RuntimeError`` from torch, an ``IndexError`` from a value the
model never should have held) is a check nobody wrote. Either way the user must learn which
node failed, on what, and why, without reading sonnx's source: :func:`node_error` gives a
sonnx error the node's identity, and wraps any other exception into one that names the node
(name, op type, since-version), its inputs' dtypes and shapes, and keeps the original as
``__cause__``.

Which class a wrapped exception becomes is decided by what the node depends on:

- :class:`~sonnx.errors.ResourceLimitError` when memory ran out;
- :class:`~sonnx.errors.BadInputError` when the node reads, directly or through earlier
  nodes, a graph input whose declared type leaves its element type or a dim open (or any
  input of a subgraph): the values fed to the run may be what does not fit;
- :class:`~sonnx.errors.BadModelError` otherwise: the node reads only weights, constants and
  inputs whose fully declared type the run already checked, so the model itself is
  inconsistent.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import onnx
import torch

from sonnx.dtypes import dtype_name
from sonnx.errors import BadInputError, BadModelError, ResourceLimitError, SonnxError
from sonnx.onnx.registry import NodeInfo
from sonnx.onnx.values import OptionalValue, TensorSequence
from sonnx.tensor import Tensor

__all__ = ["free_inputs", "input_dependent", "node_error"]

_MESSAGE_LIMIT = 400  # characters of the original message kept in ours (all of it in __cause__)


def node_error(
    info: NodeInfo,
    names: Sequence[str],
    args: Sequence[Any],
    error: Exception,
    blames_input: bool,
    has_subgraphs: bool = False,
) -> Exception:
    """The error to raise for ``error`` raised while node ``info`` ran on ``args``.

    A sonnx error is returned itself, its message prefixed with the node's identity (or, when
    an inner node of this node's subgraph already named itself, with this node as the
    enclosing one); anything else becomes a new sonnx error for the caller to raise ``from``
    the original.
    """
    if isinstance(error, SonnxError):
        if error.node is None:
            error.node = info.label()
            _prefix(error, f"node {info.label()}: ")
        elif has_subgraphs:
            _prefix(error, f"in a subgraph of node {info.label()}, ")
        return error
    cls = _wrapped_class(error, blames_input)
    text = str(error).strip().splitlines()
    reason = text[0][:_MESSAGE_LIMIT] if text else ""
    wrapped = cls(
        f"node {info.label()} could not run: {type(error).__name__}"
        f"{': ' + reason if reason else ''}; received inputs {describe_inputs(names, args)}"
    )
    wrapped.node = info.label()
    return wrapped


def _prefix(error: SonnxError, prefix: str) -> None:
    first = str(error.args[0]) if error.args else ""
    error.args = (prefix + first, *error.args[1:])


def _wrapped_class(error: Exception, blames_input: bool) -> type[SonnxError]:
    if isinstance(error, (MemoryError, torch.OutOfMemoryError)) or (
        isinstance(error, RuntimeError) and "can't allocate memory" in str(error)
    ):
        return ResourceLimitError
    return BadInputError if blames_input else BadModelError


def describe_inputs(names: Sequence[str], args: Sequence[Any]) -> str:
    """``x: float32 (2, 3), shape: int64 (2,)`` for a node's input values."""
    if not args:
        return "(none)"
    shown = []
    for position, value in enumerate(args):
        name = names[position] if position < len(names) and names[position] else "-"
        shown.append(f"{name}: {describe_value(value)}")
    return ", ".join(shown)


def describe_value(value: Any) -> str:
    """One graph value as dtype and shape (sequences and optionals by what they hold)."""
    if value is None:
        return "absent"
    if isinstance(value, Tensor):
        value = value.data
    if isinstance(value, torch.Tensor):
        return f"{dtype_name(value.dtype)} {tuple(value.shape)}"
    if isinstance(value, TensorSequence):
        return f"sequence of {len(value)} tensor(s)"
    if isinstance(value, OptionalValue):
        return "optional " + describe_value(value.value)
    return type(value).__name__


def free_inputs(graph: onnx.GraphProto, input_names: Iterable[str], is_subgraph: bool) -> set[str]:
    """The graph inputs whose values a run may feed freely: every input of a subgraph, and
    graph inputs whose declared type leaves the element type or a dim open."""
    names = set(input_names)
    if is_subgraph:
        return names
    declared = {v.name: v for v in graph.input}
    return {n for n in names if n not in declared or not _fully_declared(declared[n])}


def _fully_declared(value: onnx.ValueInfoProto) -> bool:
    if value.type.WhichOneof("value") != "tensor_type":
        return False
    tt = value.type.tensor_type
    if not tt.elem_type or not tt.HasField("shape"):
        return False
    return all(d.WhichOneof("value") == "dim_value" and d.dim_value > 0 for d in tt.shape.dim)


def input_dependent(
    reads: Sequence[Sequence[str]], writes: Sequence[Sequence[str]], free: set[str]
) -> list[bool]:
    """For steps in execution order (the names each reads and writes), whether each depends
    on a name in ``free``."""
    tainted = set(free)
    flags = []
    for step_reads, step_writes in zip(reads, writes, strict=True):
        hit = any(n in tainted for n in step_reads)
        flags.append(hit)
        if hit:
            tainted.update(n for n in step_writes if n)
    return flags
