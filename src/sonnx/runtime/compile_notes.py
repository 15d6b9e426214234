"""The lines graph mode prints while it compiles, so that a long first run does not look hung.

Compiling a graph with inductor takes from seconds to minutes (10-150 s for a CNN or a BERT on
a laptop CPU), and it happens inside an ordinary ``rep.run`` call: the first run of a model,
or of a new input shape. So each compile says, on one line, that it starts and for what, and on
one line when it is done, how long it took. Graphs loaded from the store print nothing.

The lines go to the ``sonnx.graph_mode`` logger at WARNING level, which Python prints to
stderr even where logging was never configured; silence them with
``logging.getLogger("sonnx.graph_mode").setLevel(logging.ERROR)``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch

from sonnx.dtypes import dtype_name

log = logging.getLogger("sonnx.graph_mode")


def describe_inputs(inputs: Sequence[torch.Tensor]) -> str:
    """``float32[1, 3, 224, 224], int64[1, 128]``: what a graph is compiled for."""
    return ", ".join(f"{dtype_name(x.dtype)}{list(x.shape)}" for x in inputs) or "no inputs"


@contextmanager
def compiling(what: str) -> Iterator[None]:
    """Say that a graph for ``what`` is being compiled, then (if it compiled) how long that
    took."""
    log.warning("sonnx graph mode: compiling a new graph for %s; this can take minutes", what)
    started = time.perf_counter()
    yield
    log.warning("sonnx graph mode: compiled in %.1f s", time.perf_counter() - started)
