"""What the indexing tests share: constant sonnx tensors of arrays, and one ONNX node run by
onnx.reference."""

from __future__ import annotations

import numpy as np
from onnx import helper
from onnx.reference import ReferenceEvaluator

from sonnx.tensor import Tensor


def t(a) -> Tensor:
    return Tensor(data=np.asarray(a), requires_grad=False)


def reference(op_type: str, inputs: list, n_out: int = 1, **attrs) -> list[np.ndarray]:
    """The outputs of one ONNX node run by onnx.reference (``None`` marks an absent input)."""
    names = ["" if x is None else f"i{k}" for k, x in enumerate(inputs)]
    outs = [f"o{k}" for k in range(n_out)]
    node = helper.make_node(op_type, names, outs, **attrs)
    feeds = {n: x for n, x in zip(names, inputs, strict=True) if n}
    return ReferenceEvaluator(node).run(None, feeds)
