"""Warnings that point at the caller's line, not at sonnx's.

A warning raised deep in a run (graph mode running a step eagerly, onnxruntime refusing a
node) is found by the line it names: ``warnings.warn``'s fixed ``stacklevel`` named a line
inside sonnx, which says nothing to the user. :func:`warn_at_caller` names the first frame,
going outwards, that is neither sonnx's nor torch's (a compiled graph's extern call or a
hook runs sonnx code under torch's frames): the user's ``rep.run(...)`` or ``generate(...)``.
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

import torch

__all__ = ["warn_at_caller"]

_OWN_FOLDERS = tuple(
    str(Path(m.__file__).parent) + os.sep for m in (sys.modules[__package__], torch)
)


def warn_at_caller(message: str, category: type[Warning]) -> None:
    """Warn ``message`` as ``category``, attributed to the caller's code.

    :param message: the text.
    :param category: the warning class.
    """
    frame, level = sys._getframe(1), 2
    while frame is not None and frame.f_code.co_filename.startswith(_OWN_FOLDERS):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level if frame is not None else 2)
