"""Importer registrations for the signal operators: see sonnx.operators.spectral.transforms.

DFT-17 (axis attribute) and DFT-20 (axis input) are one class that branches on its version.
"""

from __future__ import annotations

from sonnx.onnx.registry import register_operators
from sonnx.operators.spectral.transforms import (
    DFT,
    STFT,
    BlackmanWindow,
    HammingWindow,
    HannWindow,
    MelWeightMatrix,
)

register_operators(DFT, STFT, HannWindow, HammingWindow, BlackmanWindow, MelWeightMatrix)
