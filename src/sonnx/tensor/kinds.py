"""The tensors that are not plain values: strings, symbolic shapes, placeholders for model
inputs, the records an operator keeps of what it read, and the fast constructors an operator
uses for its outputs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from sonnx import dtypes
from sonnx.device import Device
from sonnx.errors import BadInputError
from sonnx.strings import StringArray, as_string_array
from sonnx.symbolic_sizes import SymbolicInts
from sonnx.tensor.core import UNSET, Tensor, check_shape, float32

if TYPE_CHECKING:
    from sonnx.engine.operator import Operator


class StringTensor(Tensor):
    """A tensor of strings: ``data`` is a :class:`~sonnx.strings.StringArray` on the host,
    ``dtype`` is :data:`~sonnx.dtypes.STRING`, and no gradient flows through it.

    ``Tensor(data=...)`` with a string array (or ``dtype="string"``) makes one; it takes
    ``Tensor``'s arguments.

    :param shape: the shape of a tensor of empty strings (ignored when ``data`` is given).
    :param device: ignored: strings live on the host.
    :param dtype: ignored: always :data:`~sonnx.dtypes.STRING`.
    :param data: the strings: a NumPy ``str``/``bytes``/``object`` array, nested lists of
        ``str``, a string tensor or a :class:`~sonnx.strings.StringArray`.
    :param requires_grad: ignored: no gradient flows through strings.
    :param stores_grad: ignored: a string tensor is never a parameter.
    :param creator: the operator that made it (set by the operators, not by users).
    :param name: the tensor's name.
    :raises BadInputError: ``data`` holds something other than strings.
    """

    def __init__(
        self,
        shape: Sequence[int] = (),
        device: Device | None = None,
        dtype: Any = UNSET,
        data: Any = None,
        requires_grad: bool = False,
        stores_grad: bool = False,
        creator: Operator | None = None,
        name: str | None = None,
    ) -> None:
        if data is None:
            values = np.full(check_shape(shape), "", dtype=object)
        elif isinstance(data, Tensor):
            values = data.data.array
        elif isinstance(data, StringArray):
            values = data.array
        else:
            values = as_string_array(data, name or "a string tensor")
        self.data: StringArray = StringArray(values)
        self.creator = creator
        self.output_index = 0
        self.name = name
        self._requires_grad = False
        self._stores_grad = False

    def _sync_torch_grad(self) -> None:
        """Strings carry no gradient."""

    def to_type(self, dtype: Any) -> Tensor:
        """Not possible for strings: parse or format them with the ONNX ``Cast`` operator.

        :param dtype: the element type asked for.
        :returns: never.
        :raises BadInputError: always.
        """
        raise BadInputError("a string tensor cannot change its element type in place; use Cast")

    def clone(self) -> Tensor:
        """A copy of the strings with the same name (no creator).

        :returns: the copy.
        """
        return StringTensor(data=self.data.array.copy(), name=self.name)

    def item(self) -> str:
        """The string of a one-element tensor.

        :returns: the string.
        :raises ValueError: the tensor has more than one element (NumPy's error).
        """
        return self.data.array.item()


def string_tensor(data: StringArray, creator: Operator | None = None, index: int = 0) -> Tensor:
    """An operator's string output: ``data`` wrapped, with its creator recorded."""
    return _output(StringTensor, data, creator, index)


class SymbolicTensor(Tensor):
    """A shape value while graph mode traces with symbolic sizes: ``data`` is a
    :class:`~sonnx.symbolic_sizes.SymbolicInts`, whose elements may be torch symbols."""


def symbolic_tensor(data: SymbolicInts, creator: Operator | None = None, index: int = 0) -> Tensor:
    """An operator's symbolic shape value: ``data`` wrapped, with its creator recorded."""
    return _output(SymbolicTensor, data, creator, index)


def _output(kind: type[Tensor], data: Any, creator: Operator | None, index: int) -> Tensor:
    """Output ``index`` of ``creator`` holding ``data``, made the fast way (no checks or
    conversions): string and symbolic values carry no gradient."""
    out = object.__new__(kind)
    out.data = data
    out.creator = creator
    out.output_index = index
    out.name = None
    out._requires_grad = False
    out._stores_grad = False
    return out


def computed_tensor(data: torch.Tensor, name: str | None = None) -> Tensor:
    """A value computed inside an imported run: ``data`` wrapped without a creator (the run
    is recorded as one node, not each value), the fast way: no checks or conversions."""
    out = object.__new__(Tensor)
    out.data = data
    out.creator = None
    out.output_index = 0
    out.name = name
    out._requires_grad = data.requires_grad
    out._stores_grad = False
    return out


class PlaceHolder(Tensor):
    """A tensor that stands for a model input whose values arrive later: the inputs given to
    :meth:`~sonnx.model.Model.compile`, which builds the layers' parameters from their shapes.

    :param shape: the input's shape, batch size included.
    :param device: where the values will live (None: the default device).
    :param dtype: the element type (float32 unless given).
    :param name: the input's name (a graph input's name in export).
    :raises BadInputError: a shape that is not a sequence of non-negative ints, or an unknown
        dtype.
    """

    def __init__(
        self,
        shape: Sequence[int],
        device: Device | None = None,
        dtype: Any = float32,
        name: str | None = None,
    ) -> None:
        super().__init__(shape=shape, device=device, dtype=dtype, requires_grad=False, name=name)


class RecordedTensor(Tensor):
    """What the graph keeps of a computed tensor that an operator read: where it came from
    (``creator``, ``output_index``), its name, shape, dtype and device — not its values.

    Operators hold their inputs so that :func:`sonnx.to_onnx` and ``backward`` can walk the
    graph. Were those the full tensors, every activation of a training step would stay alive
    until the step's last tensor is dropped, while torch frees each one during backward as
    soon as its gradient is done: training would need more memory than plain torch and, on the
    CPU, fault in fresh pages for the next step's buffers. Reading the values of a record is an
    error that says so; the tensor the operator returned still has them.
    """

    def __init__(self, source: Tensor) -> None:
        self.creator = source.creator
        self.output_index = source.output_index
        self.name = source.name
        self._requires_grad = source._requires_grad
        self._stores_grad = False
        self._shape = source.data.shape
        self._dtype = source.data.dtype
        self._device = source.data.device

    @property
    def data(self) -> torch.Tensor:  # type: ignore[override]
        op = self.creator.op_type if self.creator is not None else "?"
        raise BadInputError(
            f"the values of tensor {self.name or ''!r} (output {self.output_index} of {op}, "
            f"shape {tuple(self._shape)}, {dtypes.dtype_name(self._dtype)}) are not kept by the "
            "recorded graph; read them from the tensor the operator returned"
        )

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self._shape)

    @property
    def dtype(self) -> torch.dtype:
        return self._dtype

    @property
    def device(self) -> Device:
        return Device(self._device)

    def ndim(self) -> int:
        return len(self._shape)

    def size(self) -> int:
        return self._shape.numel()

    def is_empty(self) -> bool:
        return self._shape.numel() == 0
