"""``Tensor``: a torch tensor plus the operation that created it.

The wrapped ``torch.Tensor`` lives in ``.data`` and does all the math; the wrapper adds what
sonnx needs on top: ``creator`` (the :class:`~sonnx.engine.operator.Operator` that produced
this tensor, so the exporter can walk from outputs back to inputs), ``stores_grad`` (this tensor
is a parameter whose gradient :func:`sonnx.autograd.backward` yields) and a ``name``.

The package gathers three modules: :mod:`~sonnx.tensor.core` (the ``Tensor`` class),
:mod:`~sonnx.tensor.kinds` (string, symbolic, placeholder and recorded tensors) and
:mod:`~sonnx.tensor.creation` (making tensors from data and reading their values back).
"""

from sonnx.tensor.core import (
    Tensor,
    bfloat16,
    bool_,
    float16,
    float32,
    float64,
    int8,
    int16,
    int32,
    int64,
    uint8,
)
from sonnx.tensor.creation import from_numpy, from_torch, ones, random, to_host, to_numpy, zeros
from sonnx.tensor.kinds import (
    PlaceHolder,
    RecordedTensor,
    StringTensor,
    SymbolicTensor,
    computed_tensor,
    string_tensor,
    symbolic_tensor,
)

__all__ = [
    "PlaceHolder",
    "RecordedTensor",
    "StringTensor",
    "SymbolicTensor",
    "Tensor",
    "bfloat16",
    "bool_",
    "computed_tensor",
    "float16",
    "float32",
    "float64",
    "from_numpy",
    "from_torch",
    "int8",
    "int16",
    "int32",
    "int64",
    "ones",
    "random",
    "string_tensor",
    "symbolic_tensor",
    "to_host",
    "to_numpy",
    "uint8",
    "zeros",
]
