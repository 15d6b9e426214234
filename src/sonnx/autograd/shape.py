"""Shape manipulation: Reshape, Flatten, Transpose, Concat, Split, Slice, Squeeze, Unsqueeze, Tile,
Expand, Pad, Shape, Size, Constant, ConstantOfShape, Range, Identity, EyeLike, Trilu,
DepthToSpace, SpaceToDepth, CenterCropPad, ReverseSequence.
"""

__all__: list[str] = []
