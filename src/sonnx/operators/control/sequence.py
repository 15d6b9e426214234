"""The sequence operators: ONNX ``seq(tensor)`` values made, read, changed and mapped.

A sequence is a :class:`~sonnx.engine.values.TensorSequence` (a list of ordinary recorded
tensors), so gradients flow through the operators that cut or join its tensors.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from sonnx import dtypes
from sonnx.engine.operator import host_ints
from sonnx.engine.values import TensorSequence
from sonnx.errors import BadInputError
from sonnx.operators.control.common import GraphValueOperator, host_scalar_device
from sonnx.operators.shape.layout import squeeze, unsqueeze
from sonnx.operators.shape.slicing import concat, split
from sonnx.tensor import Tensor

__all__ = [
    "ConcatFromSequence",
    "SequenceAt",
    "SequenceConstruct",
    "SequenceEmpty",
    "SequenceErase",
    "SequenceInsert",
    "SequenceLength",
    "SequenceMap",
    "SplitToSequence",
]


class _Positioned(GraphValueOperator):
    """A sequence operator with a ``position`` input (negative counts from the end)."""

    def position(self, seq: TensorSequence, pos: Tensor | None, insert: bool) -> int:
        """``pos`` as an index into ``seq``, checked (an insert may also take the end).

        :param seq: the sequence.
        :param pos: the position tensor, or None for the end.
        :param insert: whether the position is where to insert.
        :returns: the index, from 0.
        """
        n = len(seq)
        if pos is None:
            return n if insert else n - 1
        p = int(pos.data.reshape(-1)[0].item())
        low, high = -n, (n if insert else n - 1)
        if not low <= p <= high:
            raise BadInputError(
                f"{self.where()}: position must be in [{low}, {high}] for a sequence "
                f"of length {n}, received {p}"
            )
        return p + n if p < 0 else p


class SequenceConstruct(GraphValueOperator):
    """A sequence of the given tensors."""

    op_type = "SequenceConstruct"
    since_versions: ClassVar[tuple[int, ...]] = (11,)

    def run(self, inputs: list[Any]) -> TensorSequence:
        """:param inputs: the tensors.
        :returns: the sequence of them."""
        return TensorSequence(list(inputs))


class SequenceEmpty(GraphValueOperator):
    """An empty sequence of element type ``dtype`` (float32 by default)."""

    op_type = "SequenceEmpty"
    since_versions: ClassVar[tuple[int, ...]] = (11,)

    def run(self, inputs: list[Any]) -> TensorSequence:
        """:param inputs: none.
        :returns: the empty sequence."""
        code = self.attrs.get("dtype")
        return TensorSequence([], dtypes.onnx_to_torch(code) if code else torch.float32)


class SequenceInsert(_Positioned):
    """The sequence with a tensor inserted at ``position`` (by default at the end)."""

    op_type = "SequenceInsert"
    since_versions: ClassVar[tuple[int, ...]] = (11,)

    def run(self, inputs: list[Any]) -> TensorSequence:
        """:param inputs: ``[sequence, tensor, position?]``.
        :returns: a new sequence."""
        seq, tensor = inputs[0], inputs[1]
        items = list(seq)
        items.insert(self.position(seq, inputs[2] if len(inputs) > 2 else None, True), tensor)
        return TensorSequence(items, seq.dtype)


class SequenceAt(_Positioned):
    """The tensor at ``position``."""

    op_type = "SequenceAt"
    since_versions: ClassVar[tuple[int, ...]] = (11,)

    def run(self, inputs: list[Any]) -> Tensor:
        """:param inputs: ``[sequence, position]``.
        :returns: the tensor there."""
        return inputs[0][self.position(inputs[0], inputs[1], False)]


class SequenceErase(_Positioned):
    """The sequence without the tensor at ``position`` (by default the last)."""

    op_type = "SequenceErase"
    since_versions: ClassVar[tuple[int, ...]] = (11,)

    def run(self, inputs: list[Any]) -> TensorSequence:
        """:param inputs: ``[sequence, position?]``.
        :returns: a new sequence."""
        seq = inputs[0]
        items = list(seq)
        del items[self.position(seq, inputs[1] if len(inputs) > 1 else None, False)]
        return TensorSequence(items, seq.dtype)


class SequenceLength(GraphValueOperator):
    """The number of tensors in a sequence, as a 0-d int64 tensor."""

    op_type = "SequenceLength"
    since_versions: ClassVar[tuple[int, ...]] = (11,)

    def run(self, inputs: list[Any]) -> Tensor:
        """:param inputs: ``[sequence]``.
        :returns: its length."""
        device = host_scalar_device(inputs[0])
        data = torch.tensor(len(inputs[0]), dtype=torch.int64, device=device)
        return Tensor(data=data, requires_grad=False)


class ConcatFromSequence(GraphValueOperator):
    """The sequence's tensors joined along ``axis`` (a new axis there when ``new_axis``)."""

    op_type = "ConcatFromSequence"
    since_versions: ClassVar[tuple[int, ...]] = (11,)

    def run(self, inputs: list[Any]) -> Tensor:
        """:param inputs: ``[sequence]``.
        :returns: the joined tensor."""
        seq, axis = inputs[0], self.attrs["axis"]
        if self.attrs.get("new_axis", 0):
            axis = axis % (seq[0].ndim() + 1)
            return concat([unsqueeze(t, axis) for t in seq], axis)
        return concat(list(seq), axis)


class SplitToSequence(GraphValueOperator):
    """A tensor cut along ``axis`` into a sequence: by ``split`` (sizes, or one chunk size),
    else into pieces of one (squeezed unless ``keepdims``)."""

    op_type = "SplitToSequence"
    since_versions: ClassVar[tuple[int, ...]] = (11, 24)
    parameterising_inputs = frozenset({1})

    def run(self, inputs: list[Any]) -> TensorSequence:
        """:param inputs: ``[input, split?]``.
        :returns: the pieces."""
        x, sizes = inputs[0], inputs[1] if len(inputs) > 1 else None
        axis = self.attrs["axis"] % x.ndim()
        if sizes is None:
            parts = split(x, axis, [1] * x.shape[axis])
            if not self.attrs.get("keepdims", 1):
                parts = [squeeze(p, [axis]) for p in parts]
            return TensorSequence(list(parts), x.dtype)
        values = host_ints(sizes.data)
        if sizes.ndim() == 0:
            chunk = values[0]
            full, rest = divmod(x.shape[axis], chunk)
            values = [chunk] * full + ([rest] if rest else [])
        return TensorSequence(list(split(x, axis, values)), x.dtype)


class SequenceMap(GraphValueOperator):
    """Runs ``body`` on the i-th tensor of each input sequence (other inputs whole), once per
    position; each body output becomes a sequence."""

    op_type = "SequenceMap"
    since_versions: ClassVar[tuple[int, ...]] = (17,)

    def run(self, inputs: list[Any]) -> list[TensorSequence]:
        """:param inputs: ``[sequence, *additional]``: sequences of one length, or tensors.
        :returns: one sequence per body output."""
        body = self.subgraph("body")
        lengths = {len(v) for v in inputs if isinstance(v, TensorSequence)}
        if len(lengths) != 1:
            raise BadInputError(
                f"{self.where()}: input sequences differ in length {sorted(lengths)}"
            )
        n = lengths.pop()
        results: list[list[Tensor]] = [[] for _ in range(body.num_outputs)]
        for i in range(n):
            args = [v[i] if isinstance(v, TensorSequence) else v for v in inputs]
            for k, t in enumerate(body.run(args)):
                results[k].append(t)
        return [TensorSequence(items) for items in results]
