"""Shape manipulation: Reshape, Flatten, Transpose, Concat, Split, Slice, Squeeze, Unsqueeze, Tile,
Expand, Pad, Shape, Size, Constant, ConstantOfShape, Range, Identity, EyeLike, Trilu,
DepthToSpace, SpaceToDepth, CenterCropPad, ReverseSequence.

The operators live in three parts (``shape_layout``: views and copies, ``shape_slicing``: cut,
join and fill, ``shape_create``: new tensors); this module gathers their public names.
"""

# ruff: noqa: F403
from sonnx.operators.shape.create import *
from sonnx.operators.shape.create import __all__ as _create_all
from sonnx.operators.shape.layout import *
from sonnx.operators.shape.layout import __all__ as _layout_all
from sonnx.operators.shape.slicing import *
from sonnx.operators.shape.slicing import __all__ as _slicing_all

__all__ = [*_create_all, *_layout_all, *_slicing_all]
