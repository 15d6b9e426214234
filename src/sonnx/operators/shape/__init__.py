"""Shape manipulation: Reshape, Flatten, Transpose, Concat, Split, Slice, Squeeze, Unsqueeze, Tile,
Expand, Pad, Shape, Size, Constant, ConstantOfShape, Range, Identity, EyeLike, Trilu,
DepthToSpace, SpaceToDepth, CenterCropPad, ReverseSequence.

The operators live in four parts (``layout``: views and copies, ``slicing``: cut, join and
pick, ``padding``: grow or crop to a size, ``create``: new tensors); this module gathers their
public names.
"""

# ruff: noqa: F403, F405
from sonnx.engine.operator import Operator
from sonnx.operators.shape.create import *
from sonnx.operators.shape.create import __all__ as _create_all
from sonnx.operators.shape.layout import *
from sonnx.operators.shape.layout import __all__ as _layout_all
from sonnx.operators.shape.padding import *
from sonnx.operators.shape.padding import __all__ as _padding_all
from sonnx.operators.shape.slicing import *
from sonnx.operators.shape.slicing import __all__ as _slicing_all

__all__ = [*_create_all, *_layout_all, *_padding_all, *_slicing_all]

#: The classes the importer registers as their own converters, at their since-versions
#: (see :func:`sonnx.onnx.registry.register_operators`).
OPERATORS: tuple[type[Operator], ...] = (
    Reshape,
    Flatten,
    Transpose,
    Concat,
    Split,
    Slice,
    Squeeze,
    Unsqueeze,
    Tile,
    Expand,
    Pad,
    Shape,
    Size,
    Constant,
    ConstantOfShape,
    Range,
    EyeLike,
    Trilu,
    DepthToSpace,
    SpaceToDepth,
    CenterCropPad,
    ReverseSequence,
)
