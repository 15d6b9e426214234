"""``Tensor``: a torch tensor plus the operation that created it (the class itself; the other
kinds of tensor are in :mod:`sonnx.tensor.kinds`, making and reading them in
:mod:`sonnx.tensor.creation`).

The wrapped ``torch.Tensor`` lives in ``.data`` and does all the math; the wrapper adds what
sonnx needs on top: ``creator`` (the :class:`~sonnx.engine.operator.Operator` that produced
this tensor, so the exporter can walk from outputs back to inputs), ``stores_grad`` (this tensor
is a parameter whose gradient :func:`sonnx.autograd.backward` yields) and a ``name``.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from sonnx import dtypes
from sonnx.device import Device, as_device
from sonnx.dims import Dim
from sonnx.errors import BadInputError
from sonnx.strings import StringArray, is_string_array

if TYPE_CHECKING:
    from sonnx.engine.operator import Operator

float16 = torch.float16
bfloat16 = torch.bfloat16
float32 = torch.float32
float64 = torch.float64
int8 = torch.int8
int16 = torch.int16
int32 = torch.int32
int64 = torch.int64
uint8 = torch.uint8
bool_ = torch.bool

#: ``dtype`` not given (None is a valid value: the data's own dtype).
UNSET: Any = object()
_STRING_NAMES = (dtypes.STRING, "string", str)


def _to_torch(data: Any, device: Device, dtype: torch.dtype | None) -> torch.Tensor:
    """Turn user data into a torch tensor on ``device``; zero-copy where torch allows it."""
    if isinstance(data, Tensor):
        t = data.data
    elif isinstance(data, torch.Tensor):
        t = data
    elif isinstance(data, (np.ndarray, np.generic)):
        t = dtypes.array_to_torch(np.asarray(data))
    else:
        try:
            t = torch.as_tensor(data)
        except (TypeError, ValueError, RuntimeError) as error:
            raise BadInputError(
                f"Tensor data must be numbers (a NumPy array, a torch tensor or nested lists of "
                f"numbers), received {type(data).__name__} that torch cannot read ({error}); "
                "for strings pass a NumPy string array or dtype='string'"
            ) from None
    if dtype is not None and t.dtype != dtype:
        t = t.to(dtype)
    if t.device != device.torch_device:
        t = t.to(device.torch_device)
    return t


def check_shape(shape: Sequence[int] | int) -> tuple[int, ...]:
    """The shape of a zero-filled tensor as a tuple of ints (an int is a 1-D shape).

    :raises BadInputError: not a sequence of non-negative integers.
    """
    if isinstance(shape, int):
        shape = (shape,)
    try:
        dims = tuple(int(d) for d in shape)
    except (TypeError, ValueError):
        raise BadInputError(f"a shape must be a sequence of integers, received {shape!r}") from None
    if any(d < 0 for d in dims):
        raise BadInputError(f"a shape must have non-negative dimensions, received {dims}")
    return dims


class Tensor:
    """An n-dimensional array on a device that remembers how it was made.

    ``dtype`` defaults to the data's own dtype (float32 when there is no data): nothing is
    narrowed silently. ``requires_grad`` says whether gradients may flow through this tensor;
    ``stores_grad`` marks a parameter whose gradient :func:`~sonnx.autograd.backward` yields.
    Strings (a str/bytes/object array, or ``dtype="string"``) make a :class:`StringTensor`.

    Make one from data with :func:`from_numpy` (or ``Tensor(data=...)``); get NumPy back with
    :func:`to_numpy`.

    :param shape: the shape of a zero-filled tensor (ignored when ``data`` is given).
    :param device: where the data lives (None: ``data``'s device for a tensor, else the
        default device).
    :param dtype: the element type: a torch or NumPy dtype, a name (``"float32"``,
        ``"string"``) or an ONNX code (unset: ``data``'s own, float32 without data).
    :param data: the values: a NumPy array, a torch tensor, a sonnx Tensor, or nested lists
        or numbers.
    :param requires_grad: whether gradients may flow through this tensor.
    :param stores_grad: mark it as a parameter whose gradient ``backward`` yields.
    :param creator: the operator that made it (set by the operators, not by users).
    :param name: the tensor's name (a state's name in a Model, a graph name in export).
    :raises BadInputError: a shape that is not a sequence of non-negative ints, or an unknown
        dtype.
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Tensor:
        if cls is Tensor and (args or kwargs):
            data = kwargs.get("data", args[3] if len(args) > 3 else None)
            dtype = kwargs.get("dtype", args[2] if len(args) > 2 else None)
            strings = isinstance(data, Tensor) and isinstance(data.data, StringArray)
            if strings or is_string_array(data) or dtype in _STRING_NAMES:
                # the subclass lives beside this module and imports it
                from sonnx.tensor.kinds import StringTensor

                return object.__new__(StringTensor)
        return object.__new__(cls)

    def __init__(
        self,
        shape: Sequence[int] = (),
        device: Device | None = None,
        dtype: Any = UNSET,
        data: Any = None,
        requires_grad: bool = True,
        stores_grad: bool = False,
        creator: Operator | None = None,
        name: str | None = None,
    ) -> None:
        torch_dtype = None if dtype is UNSET or dtype is None else dtypes.as_torch_dtype(dtype)
        if data is None:
            dev = as_device(device)
            shape = check_shape(shape)
            t = torch.zeros(shape, dtype=torch_dtype or torch.float32, device=dev.torch_device)
        else:
            if device is None and isinstance(data, (Tensor, torch.Tensor)):
                dev = Device(data.device if isinstance(data, torch.Tensor) else data.data.device)
            else:
                dev = as_device(device)
            t = _to_torch(data, dev, torch_dtype)
        self.data: torch.Tensor = t
        self.creator = creator
        self.output_index = 0
        self.name = name
        self._requires_grad = bool(requires_grad)
        self._stores_grad = bool(stores_grad)
        self._sync_torch_grad()

    # ---- gradient flags -------------------------------------------------------------------
    def _sync_torch_grad(self) -> None:
        """A leaf parameter's torch tensor tracks gradients exactly when it is trainable."""
        if self.creator is None and self.data.is_leaf:
            want = self._requires_grad and self._stores_grad and dtypes.is_float(self.data.dtype)
            if self.data.requires_grad != want:
                self.data.requires_grad_(want)

    @property
    def requires_grad(self) -> bool:
        """Whether gradients may flow through this tensor (settable)."""
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        self._requires_grad = bool(value)
        self._sync_torch_grad()

    @property
    def stores_grad(self) -> bool:
        """Whether this is a parameter whose gradient ``backward`` yields (settable)."""
        return self._stores_grad

    @stores_grad.setter
    def stores_grad(self, value: bool) -> None:
        self._stores_grad = bool(value)
        self._sync_torch_grad()

    @property
    def is_param(self) -> bool:
        """A trainable leaf: ``backward`` yields its gradient."""
        return self._requires_grad and self._stores_grad

    # ---- shape, dtype, device -------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        """The sizes, as :class:`~sonnx.dims.Dim` ints that remember this tensor and axis, so
        a shape computed from them exports as graph operations (see :mod:`sonnx.dims`)."""
        ref = weakref.ref(self)
        return tuple(Dim(size, ("dim", ref, axis)) for axis, size in enumerate(self.data.shape))

    @property
    def dtype(self) -> torch.dtype:
        """The element type, as a torch dtype (:func:`~sonnx.dtypes.dtype_name` gives ONNX's
        name)."""
        return self.data.dtype

    @property
    def device(self) -> Device:
        """The :class:`~sonnx.device.Device` the data lives on."""
        return Device(self.data.device)

    def ndim(self) -> int:
        """The number of dimensions (SINGA's method, not a property).

        :returns: the rank; 0 for a scalar.
        """
        return self.data.dim()

    def size(self) -> int:
        """The number of elements (SINGA's meaning of ``size``).

        :returns: the product of the shape; 1 for a scalar.
        """
        return self.data.numel()

    def __len__(self) -> int:
        if self.data.dim() == 0:
            raise BadInputError("len() of a 0-d tensor")
        return self.data.shape[0]

    def is_empty(self) -> bool:
        """Whether the tensor has no elements (a dimension of size 0).

        :returns: True when :meth:`size` is 0.
        """
        return self.data.numel() == 0

    # ---- moving and copying data ----------------------------------------------------------
    def to_device(self, device: Device) -> Tensor:
        """Move this tensor's data to ``device`` in place; returns self.

        :param device: a Device, a torch device or a device name.
        :returns: this tensor.
        :raises BadInputError: ``device`` is none of these.
        """
        dev = as_device(device)
        self.data = self.data.detach().to(dev.torch_device)
        self._sync_torch_grad()
        return self

    def to_host(self) -> Tensor:
        """Move this tensor's data to the CPU in place; returns self.

        :returns: this tensor.
        """
        return self.to_device(Device("cpu"))

    def to_type(self, dtype: Any) -> Tensor:
        """Convert the element type in place (not recorded for export); returns self.

        :param dtype: the new element type (a torch or NumPy dtype, a name or an ONNX code).
        :returns: this tensor.
        :raises BadInputError: an unknown dtype.
        """
        self.data = self.data.detach().to(dtypes.as_torch_dtype(dtype))
        self._sync_torch_grad()
        return self

    def as_type(self, dtype: Any) -> Tensor:
        """A new tensor with the element type converted (recorded as an ONNX Cast).

        :param dtype: the new element type (a torch or NumPy dtype, a name or an ONNX code).
        :returns: the converted tensor.
        :raises BadInputError: an unknown dtype.
        """
        from sonnx.operators.elementwise.cast import cast

        return cast(self, dtype)

    def copy_from_numpy(self, array: np.ndarray, offset: int = 0) -> None:
        """Overwrite this tensor's elements (from element ``offset``) with ``array``'s.

        :param array: the values, in row-major order (cast to this tensor's dtype).
        :param offset: the first flat element to overwrite.
        :raises BadInputError: the values do not fit after ``offset``.
        """
        src = torch.from_numpy(np.ascontiguousarray(array)).reshape(-1)
        flat = self.data.detach().view(-1)
        if offset + src.numel() > flat.numel():
            raise BadInputError(
                f"copy_from_numpy: {src.numel()} elements at offset {offset} do not fit in a "
                f"tensor of shape {self.shape}"
            )
        with torch.no_grad():
            flat[offset : offset + src.numel()].copy_(src.to(flat.dtype))

    def copy_data(self, other: Tensor) -> None:
        """Overwrite this tensor's values with ``other``'s (same shape).

        :param other: the tensor to copy from.
        :raises BadInputError: ``other`` has another shape.
        """
        if other.shape != self.shape:
            raise BadInputError(
                f"copy_data: expected a tensor of shape {self.shape}, received {other.shape}"
            )
        with torch.no_grad():
            self.data.copy_(other.data)

    def set_value(self, value: float) -> Tensor:
        """Fill in place with ``value``.

        :param value: the value of every element.
        :returns: this tensor.
        """
        with torch.no_grad():
            self.data.fill_(value)
        return self

    def gaussian(self, mean: float, std: float) -> Tensor:
        """Fill in place with samples from N(mean, std^2).

        :param mean: the mean.
        :param std: the standard deviation.
        :returns: this tensor.
        """
        with torch.no_grad():
            self.data.normal_(mean, std)
        return self

    def uniform(self, low: float, high: float) -> Tensor:
        """Fill in place with samples from U(low, high).

        :param low: the lower bound.
        :param high: the upper bound.
        :returns: this tensor.
        """
        with torch.no_grad():
            self.data.uniform_(low, high)
        return self

    def bernoulli(self, p: float) -> Tensor:
        """Fill in place with 1 (probability ``p``) or 0.

        :param p: the probability of a 1, in [0, 1].
        :returns: this tensor.
        """
        with torch.no_grad():
            self.data.bernoulli_(p)
        return self

    def clone(self) -> Tensor:
        """A detached copy with the same flags and name (no creator).

        :returns: the copy.
        """
        return Tensor(
            data=self.data.detach().clone(),
            requires_grad=self._requires_grad,
            stores_grad=self._stores_grad,
            name=self.name,
        )

    def item(self) -> float | int | bool:
        """The value of a one-element tensor.

        :returns: the value as a Python number.
        :raises RuntimeError: the tensor has more than one element (torch's error).
        """
        return self.data.item()

    def numpy(self) -> np.ndarray:
        """The values as a NumPy array on the host (see :func:`to_numpy`).

        :returns: the array.
        """
        # the conversions live beside this module and import it
        from sonnx.tensor.creation import to_numpy

        return to_numpy(self)

    def torch(self) -> torch.Tensor:
        """The wrapped torch tensor, ``data`` (shares memory; changing it changes this tensor).

        :returns: the torch tensor.
        """
        return self.data

    # ---- operators, all recorded so they can be exported ----------------------------------
    def __add__(self, other: Any) -> Tensor:
        from sonnx.operators.elementwise.binary import add

        return add(self, other)

    def __radd__(self, other: Any) -> Tensor:
        from sonnx.operators.elementwise.binary import add

        return add(other, self)

    def __sub__(self, other: Any) -> Tensor:
        from sonnx.operators.elementwise.binary import sub

        return sub(self, other)

    def __rsub__(self, other: Any) -> Tensor:
        from sonnx.operators.elementwise.binary import sub

        return sub(other, self)

    def __mul__(self, other: Any) -> Tensor:
        from sonnx.operators.elementwise.binary import mul

        return mul(self, other)

    def __rmul__(self, other: Any) -> Tensor:
        from sonnx.operators.elementwise.binary import mul

        return mul(other, self)

    def __truediv__(self, other: Any) -> Tensor:
        from sonnx.operators.elementwise.binary import div

        return div(self, other)

    def __rtruediv__(self, other: Any) -> Tensor:
        from sonnx.operators.elementwise.binary import div

        return div(other, self)

    def __pow__(self, other: Any) -> Tensor:
        from sonnx.operators.elementwise.binary import pow

        return pow(self, other)

    def __neg__(self) -> Tensor:
        from sonnx.operators.elementwise.unary import neg

        return neg(self)

    def __matmul__(self, other: Tensor) -> Tensor:
        from sonnx.operators.linalg.products import matmul

        return matmul(self, other)

    def __lt__(self, other: Any) -> Tensor:
        from sonnx.operators.elementwise.logic import less

        return less(self, other)

    def __le__(self, other: Any) -> Tensor:
        from sonnx.operators.elementwise.logic import less_equal

        return less_equal(self, other)

    def __gt__(self, other: Any) -> Tensor:
        from sonnx.operators.elementwise.logic import greater

        return greater(self, other)

    def __ge__(self, other: Any) -> Tensor:
        from sonnx.operators.elementwise.logic import greater_equal

        return greater_equal(self, other)

    def reshape(self, shape: Sequence[int]) -> Tensor:
        """The values in another shape (recorded as an ONNX Reshape).

        :param shape: the new shape, ONNX's meaning (``0`` copies a dim, ``-1`` infers one).
        :returns: the reshaped tensor.
        """
        from sonnx.operators.shape.layout import reshape

        return reshape(self, shape)

    def transpose(self, axes: Sequence[int] | None = None) -> Tensor:
        """The axes permuted (recorded as an ONNX Transpose).

        :param axes: the new order of the axes (None: reversed).
        :returns: the transposed tensor.
        """
        from sonnx.operators.shape.layout import transpose

        return transpose(self, axes)

    @property
    def T(self) -> Tensor:
        """The axes reversed: ``transpose()`` (recorded as an ONNX Transpose)."""
        return self.transpose()

    def __repr__(self) -> str:
        label = f" name={self.name!r}" if self.name else ""
        made = f" creator={self.creator.op_type}" if self.creator is not None else ""
        dtype = dtypes.dtype_name(self.dtype)  # ONNX's names (float32), not torch.float32
        return f"Tensor(shape={self.shape}, dtype={dtype}, device={self.device}{label}{made})"
