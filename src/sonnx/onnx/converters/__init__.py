"""The importer's registrations; importing this registers them all.

:mod:`~sonnx.onnx.converters.families` registers every family's operator classes in one loop;
the other modules are adapters, converter functions for what a class alone cannot do: an older
version's attributes turned into inputs, a training flag followed, a map or a subgraph handled.
"""

from sonnx.onnx.converters import (  # noqa: F401
    attention,
    cast,
    elementwise,
    families,
    indexing,
    linalg,
    ml,
    normalization,
    reduce,
    resize,
    rnn,
    shape,
)
