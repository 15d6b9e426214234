"""sonnx's own torch operators (``sonnx::name``): CPU calls that graph mode's trace keeps as one
extern call each instead of tracing into them.

Two kinds use them: onnxruntime's kernels for the ``com.microsoft`` integer products
(:mod:`sonnx.operators.quantize.ort_kernels`), and steps whose work depends on values a trace
cannot read, such as a decode step's attention over the cache rows each sequence has filled
(:mod:`sonnx.operators.attention.filled_rows`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["extern_op"]

#: sonnx's torch operators, defined at the dispatcher's level.
_LIBRARY = torch.library.Library("sonnx", "FRAGMENT")


def extern_op(
    name: str, schema: str, fake: Callable[..., Any]
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Define ``sonnx::name`` with the decorated function as its CPU kernel and ``fake`` as
    its shape function (what graph mode's trace records as one extern call).

    Defined on a ``torch.library.Library`` rather than by ``torch.library.custom_op``: the
    latter's Python layers (its autograd wrapper, dynamo's guard) cost about 60-100 us a call,
    paid by each such node of a compiled graph at every run. Nothing is lost: callers use
    these operators only where no gradient is needed, and none mutates its inputs.

    :param name: the operator's name in the ``sonnx`` namespace.
    :param schema: its arguments and results, in torch's schema language.
    :param fake: its fake implementation (output shapes and dtypes from the inputs').
    :returns: the decorator, returning the function unchanged.
    """

    def define(kernel: Callable[..., Any]) -> Callable[..., Any]:
        _LIBRARY.define(f"{name}{schema}")
        _LIBRARY.impl(name, kernel, "CPU")
        torch.library.register_fake(f"sonnx::{name}", fake, lib=_LIBRARY)
        return kernel

    return define
