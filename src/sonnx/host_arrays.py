"""The one protocol for values that live in a NumPy object array on the host but travel through
code written for ``torch.Tensor``: :class:`~sonnx.strings.StringArray` (string tensors) and
:class:`~sonnx.symbolic_sizes.SymbolicInts` (sizes some of which are symbolic while tracing).

Shape-, device- and gradient-generic code (the importer, the step loop, shape checks) reads only
the members defined here, so a stand-in answers them the same way: on the CPU, never requiring a
gradient, shaped as its array. What differs (the dtype, ``is_floating_point``, how values convert)
stays on the subclass.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

_CPU = torch.device("cpu")


class HostArray:
    """A host NumPy ``array`` with the read-only parts of the ``torch.Tensor`` interface.

    Subclasses define ``dtype``, :meth:`is_floating_point` and :meth:`_like` (a stand-in of the
    same kind around another array, used by :meth:`reshape`)."""

    __slots__ = ("array",)
    requires_grad = False
    is_leaf = True
    grad = None
    grad_fn = None
    _version = 0

    array: np.ndarray

    @property
    def shape(self) -> torch.Size:
        return torch.Size(self.array.shape)

    @property
    def device(self) -> torch.device:
        return _CPU

    def dim(self) -> int:
        return self.array.ndim

    def numel(self) -> int:
        return int(self.array.size)

    def size(self, dim: int | None = None) -> torch.Size | int:
        return self.shape if dim is None else self.array.shape[dim]

    def __len__(self) -> int:
        return len(self.array)

    def is_complex(self) -> bool:
        return False

    def detach(self) -> HostArray:
        return self

    def tolist(self) -> Any:
        return self.array.tolist()

    def reshape(self, *shape: Any) -> HostArray:
        dims = shape[0] if len(shape) == 1 and not isinstance(shape[0], int) else shape
        return self._like(self.array.reshape(tuple(int(d) for d in dims)))

    def _like(self, array: np.ndarray) -> HostArray:
        raise NotImplementedError(f"{type(self).__name__} must define _like")
