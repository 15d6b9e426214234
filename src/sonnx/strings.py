"""String tensors: ONNX's ``STRING`` element type, held as NumPy arrays of Python ``str``.

torch has no string dtype, so a string tensor (a :class:`~sonnx.tensor.StringTensor`) holds a
:class:`StringArray` in ``.data`` where other tensors hold a ``torch.Tensor``. It answers the
questions generic code asks of a tensor (``shape``, ``dtype`` = :data:`~sonnx.dtypes.STRING`,
``device`` = cpu, ``dim()``, ``numel()``, no gradient) and lives on the host whatever the
model's device: strings are tokenised, compared and looked up there, and only the numbers made
from them move to the GPU.

Operators meet strings in one of three ways (:func:`run_on_strings`):

* operators that only move elements (Reshape, Transpose, Gather, Concat, Slice, Where, ...:
  their class declares ``moves_elements_only``) run their ordinary torch code on int64
  *positions* standing in for the strings, and the strings at the positions that come out are
  picked afterwards, so every layout operator the ONNX spec lets take strings does so with no
  string code of its own;
* Shape and Size read only the shape (``reads_shape_only``);
* operators that read the characters (Equal, Cast, StringConcat, LabelEncoder, ...) set
  ``takes_strings = True`` and receive the :class:`StringArray` itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from sonnx import dtypes
from sonnx.device import get_default_device
from sonnx.dtypes import STRING, StringDType
from sonnx.errors import BadInputError
from sonnx.host_arrays import HostArray

if TYPE_CHECKING:
    from sonnx.engine.operator import Operator

__all__ = ["StringArray", "as_string_array", "is_string_array", "object_array", "run_on_strings"]

_CPU = torch.device("cpu")


def object_array(values: Sequence[Any], shape: tuple[int, ...] | None = None) -> np.ndarray:
    """``values`` (a flat sequence of str) as an object array of ``shape`` (1-D by default);
    NumPy would turn a list of equal-length lists into extra dimensions, or strs into a ``<U``
    array, so elements are assigned one by one."""
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out if shape is None else out.reshape(shape)


def as_string_array(values: Any, what: str = "value") -> np.ndarray:
    """``values`` as a NumPy ``object`` array of Python ``str`` (bytes are UTF-8 decoded)."""
    array = np.asarray(values)
    if array.dtype.kind == "U":
        return array.astype(object)
    if array.dtype.kind == "S":
        return np.vectorize(lambda b: b.decode("utf-8"), otypes=[object])(array)
    if array.dtype.kind == "O" or (array.size == 0 and array.dtype.kind == "f"):
        return object_array([_as_str(v, what) for v in array.reshape(-1)], array.shape)
    raise BadInputError(f"{what}: expected strings, received an array of {array.dtype}")


def _as_str(value: Any, what: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8")
    raise BadInputError(f"{what}: expected strings, received an element of type {type(value)}")


class StringArray(HostArray):
    """An n-dimensional array of strings with the parts of the ``torch.Tensor`` interface that
    shape-, device- and gradient-generic code reads. ``array`` is the NumPy object array."""

    __slots__ = ()

    def __init__(self, values: Any) -> None:
        self.array = (
            values if _is_object_array(values) else as_string_array(values, "a string tensor")
        )

    @property
    def dtype(self) -> StringDType:
        return STRING

    def is_floating_point(self) -> bool:
        return False

    def _like(self, array: np.ndarray) -> StringArray:
        return StringArray(array)

    def requires_grad_(self, flag: bool = True) -> StringArray:
        if flag:
            raise BadInputError("string tensors carry no gradient")
        return self

    def to(self, *args: Any, **kwargs: Any) -> StringArray:
        """Strings stay on the host whatever device is asked for; a dtype change is refused."""
        for target in (*args, kwargs.get("dtype")):
            if isinstance(target, torch.dtype):
                raise BadInputError(
                    f"a string tensor cannot be converted to {dtypes.dtype_name(target)}; use Cast"
                )
        return self

    def cpu(self) -> StringArray:
        return self

    def contiguous(self) -> StringArray:
        return self

    def clone(self) -> StringArray:
        return StringArray(self.array.copy())

    def numpy(self) -> np.ndarray:
        return self.array

    def __getitem__(self, index: Any) -> StringArray:
        """Strings at ``index``; a torch tensor of positions picks, as NumPy indexing does."""
        if isinstance(index, torch.Tensor):
            index = index.detach().cpu().numpy()
        return StringArray(np.asarray(self.array[index], dtype=object))

    def __repr__(self) -> str:
        return f"StringArray({self.array.tolist()!r})"


def _is_object_array(values: Any) -> bool:
    """True for an object array whose elements are all ``str`` (checked cheaply: trusted
    callers pass such arrays; anything else goes through :func:`as_string_array`)."""
    return (
        isinstance(values, np.ndarray)
        and values.dtype == object
        and all(isinstance(v, str) for v in values.reshape(-1)[:1])
    )


def is_string_array(values: Any) -> bool:
    """True for data sonnx holds as strings: a StringArray or a NumPy str/bytes/object array."""
    return isinstance(values, StringArray) or (
        isinstance(values, np.ndarray) and values.dtype.kind in "OUS"
    )


def pick(pool: np.ndarray, positions: torch.Tensor) -> StringArray:
    """The strings of the flat ``pool`` at int64 ``positions``, in the positions' shape."""
    index = positions.detach().cpu().numpy()
    return StringArray(object_array(pool[index.reshape(-1)], index.shape))


def numbers(values: np.ndarray) -> torch.Tensor:
    """A NumPy result computed from strings (a mask, ids, counts) as a torch tensor on the
    device the model runs on (see :func:`sonnx.device.get_default_device`)."""
    device = get_default_device().torch_device
    return dtypes.array_to_torch(np.ascontiguousarray(values)).to(device)


def string_inputs(op_type: str, *values: Any) -> list[np.ndarray]:
    """The NumPy arrays of inputs that must all be strings (an error names the one that is
    not)."""
    for position, v in enumerate(values):
        if type(v) is not StringArray:
            raise BadInputError(
                f"{op_type}: input {position} must be strings like the others, received "
                f"{dtypes.dtype_name(v.dtype) if hasattr(v, 'dtype') else type(v).__name__}"
            )
    return [v.array for v in values]


def equal(a: Any, b: Any) -> torch.Tensor:
    """ONNX Equal on strings: elementwise, broadcasting NumPy-style, bool out."""
    x, y = string_inputs("Equal", a, b)
    return numbers(np.equal(x, y).astype(bool))


def run_on_strings(op: Operator, raw: Sequence[Any]) -> Any:
    """Run ``op`` on inputs of which at least one is a :class:`StringArray`."""
    if op.takes_strings:
        return op.forward(*raw)
    if op.reads_shape_only:  # a zero-stride stand-in of the same shape allocates nothing
        return op.forward(*(torch.zeros(()).expand(r.shape) if _is_strings(r) else r for r in raw))
    if not op.moves_elements_only:
        which = [i for i, r in enumerate(raw) if _is_strings(r)]
        raise BadInputError(
            f"{op.op_type}: input(s) {which} are strings, which {op.op_type} does not take"
        )
    # Positions go where the other inputs (indices, conditions) are, so torch sees one device.
    device = next((r.device for r in raw if isinstance(r, torch.Tensor)), _CPU)
    pools, stand_ins, offset = [], [], 0
    for r in raw:
        if _is_strings(r):
            count = r.numel()
            stand_ins.append(torch.arange(offset, offset + count, device=device).reshape(r.shape))
            pools.append(r.array.reshape(-1))
            offset += count
        else:
            stand_ins.append(r)
    pool = np.concatenate(pools) if len(pools) > 1 else pools[0]
    result = op.forward(*stand_ins)
    if isinstance(result, torch.Tensor):
        return pick(pool, result)
    return tuple(None if r is None else pick(pool, r) for r in result)


def _is_strings(value: Any) -> bool:
    return type(value) is StringArray
