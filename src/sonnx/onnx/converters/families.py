"""Every operator family's classes, registered in one loop.

Each family package in :mod:`sonnx.operators` lists in ``OPERATORS`` the classes that are their
own converters; each is registered at the since-versions it declares, in its declared domain
(:func:`~sonnx.onnx.registry.register_operators`). Adding such an operator to its family's list
is all the importer needs; the other modules of this package hold only what a class alone
cannot do (an older version's attributes adapted, a value that is not a tensor).
"""

from __future__ import annotations

from types import ModuleType

from sonnx.onnx.registry import register_operators
from sonnx.operators import (
    activation,
    attention,
    control,
    conv,
    elementwise,
    image,
    indexing,
    linalg,
    loss,
    ml,
    normalization,
    pooling,
    quantize,
    randomness,
    reduce,
    rnn,
    shape,
    singa,
    spectral,
    text,
    training,
)

#: Every family package of :mod:`sonnx.operators` (a test holds this to the packages there).
FAMILIES: tuple[ModuleType, ...] = (
    activation, attention, control, conv, elementwise, image, indexing, linalg, loss, ml,
    normalization, pooling, quantize, randomness, reduce, rnn, shape, singa, spectral, text,
    training,
)  # fmt: skip

for _family in FAMILIES:
    register_operators(*_family.OPERATORS)
