"""What the element-wise tests share: constant sonnx tensors of arrays, and running an op on
them."""

from __future__ import annotations

import numpy as np

from sonnx.tensor import Tensor


def t(array, **kw) -> Tensor:
    return Tensor(data=np.asarray(array), requires_grad=False, **kw)


def run(fn, *arrays) -> np.ndarray:
    return fn(*(t(a) for a in arrays)).numpy()
