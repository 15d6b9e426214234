"""torch's own deprecation warnings silenced while sonnx traces and compiles.

torch's tracer and compiler use torch APIs that torch itself deprecates: importing inductor
runs ``torch.jit.script_method`` (``torch/utils/mkldnn.py``), which warns. Under a warnings
filter that makes warnings errors (``python -W error``, pytest's ``filterwarnings = error``,
common in test suites) every graph-mode compile then failed: imported models ran eagerly and
``Model.compile(..., use_graph=True)`` raised. The warnings are torch's to fix, not the user's,
so graph mode compiles under :func:`torch_deprecations_ignored`; warnings of every other
category (sonnx's own fallback warnings included) pass as the filters say.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["torch_deprecations_ignored"]


@contextmanager
def torch_deprecations_ignored() -> Iterator[None]:
    """Ignore DeprecationWarning and FutureWarning in the block (the warning filters are
    restored after it)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", FutureWarning)
        yield
