"""The image operators: ImageDecoder (``decode``), Resize, GridSample, AffineGrid and RoiAlign
(``resize``). Resize-10 and Upsample are adapted in :mod:`sonnx.onnx.converters.resize`.
"""

from sonnx.engine.operator import Operator
from sonnx.operators.image import decode, resize

#: The classes the importer registers as their own converters, at their since-versions
#: (see :func:`sonnx.onnx.registry.register_operators`).
OPERATORS: tuple[type[Operator], ...] = (
    decode.ImageDecoder,
    resize.Resize,
    resize.GridSample,
    resize.AffineGrid,
    resize.RoiAlign,
)
