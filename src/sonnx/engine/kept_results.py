"""A result kept with the tensors it was computed from, valid while they are unchanged.

Two places keep results computed from weights instead of computing them at every run: the
program keeps the results of its foldable steps (:mod:`sonnx.runtime.folding`), and the
weight-quantized products keep their dequantized weight (``MatMulNBits``,
``GatherBlockQuantized``). Both hand a result back only while each input is the same torch
tensor with the same version counter: a weight whose ``data`` was replaced (``load_states``)
is a different tensor, and an in-place change (an optimizer step, ``copy_``) bumps the
version. :class:`KeptResult` is that one check; each place keeps its own policy for when a
result may be kept at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from sonnx.tensor import Tensor

__all__ = ["KeptResult"]


class KeptResult:
    """``result``, computed from ``inputs``: torch tensors, sonnx Tensors (their torch data
    counts) or other objects (compared by identity)."""

    __slots__ = ("_inputs", "_versions", "result")

    def __init__(self, inputs: Sequence[Any], result: Any) -> None:
        self._inputs = [_data(a) for a in inputs]
        self._versions = [a._version if isinstance(a, torch.Tensor) else -1 for a in self._inputs]
        self.result = result

    def holds_for(self, inputs: Sequence[Any]) -> bool:
        """Whether ``inputs`` are the kept inputs, each unchanged since."""
        if len(inputs) != len(self._inputs):
            return False
        # a loop, not generators: a plan asks this for every folded step of every run
        for kept, version, a in zip(self._inputs, self._versions, inputs, strict=True):
            if isinstance(a, Tensor):
                a = a.data
            if a is not kept or (version >= 0 and a._version != version):
                return False
        return True


def _data(a: Any) -> Any:
    return a.data if isinstance(a, Tensor) else a
