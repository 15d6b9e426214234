"""The signal operators (``transforms``): DFT-17 (axis attribute) and DFT-20 (axis input)
are one class that branches on its version.
"""

from sonnx.engine.operator import Operator
from sonnx.operators.spectral import transforms

#: The classes the importer registers as their own converters, at their since-versions
#: (see :func:`sonnx.onnx.registry.register_operators`).
OPERATORS: tuple[type[Operator], ...] = (
    transforms.DFT,
    transforms.STFT,
    transforms.HannWindow,
    transforms.HammingWindow,
    transforms.BlackmanWindow,
    transforms.MelWeightMatrix,
)
