"""Importer registrations for the signal operators: see sonnx.operators.spectral.transforms.

DFT-17 (axis attribute) and DFT-20 (axis input) are one class that branches on its version.
"""

from __future__ import annotations

from sonnx.onnx.registry import register_operator
from sonnx.operators.spectral.transforms import (
    DFT,
    STFT,
    BlackmanWindow,
    HammingWindow,
    HannWindow,
    MelWeightMatrix,
)

register_operator(DFT, 17, 20)
register_operator(STFT, 17)
register_operator(HannWindow, 17)
register_operator(HammingWindow, 17)
register_operator(BlackmanWindow, 17)
register_operator(MelWeightMatrix, 17)
