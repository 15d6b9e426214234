"""How long graph mode may spend compiling one model, and the progress it shows meanwhile.

Compiling is paid inside ordinary runs: the first run of a model, or of a new input shape.
A model inductor struggles with (a large dynamically quantized encoder, a ``Loop`` decoder)
could otherwise keep a first run compiling for many minutes. ``prepare(...,
compile_budget=seconds)`` bounds the seconds spent compiling one prepared model (failed
compiles count; graphs loaded from the store do not): once spent, the parts not compiled yet
run eagerly, with the same results, and one warning says so. A compile under way is never cut
short (inductor cannot be interrupted safely), so the budget can be overrun by one compile.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sonnx.errors import BadInputError

__all__ = ["DEFAULT_COMPILE_BUDGET", "CompileBudget", "CompileProgress"]

#: The default budget, in seconds: a ResNet-50 or a BERT-base compiles in less on a laptop.
DEFAULT_COMPILE_BUDGET = 120.0


class CompileBudget:
    """The seconds one model's graph mode may spend compiling (None: no bound), and those
    spent so far."""

    def __init__(self, seconds: float | None) -> None:
        if seconds is not None and (
            isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds > 0
        ):
            raise BadInputError(
                f"prepare: compile_budget must be a number of seconds above 0, or None for no "
                f"bound; received {seconds!r}"
            )
        self.seconds = None if seconds is None else float(seconds)
        self.spent = 0.0

    @property
    def exhausted(self) -> bool:
        """Whether no more compiling may start."""
        return self.seconds is not None and self.spent >= self.seconds

    @contextmanager
    def counting(self) -> Iterator[None]:
        """Count the time spent inside the block (a compile, successful or not)."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self.spent += time.perf_counter() - started

    def describe(self) -> str:
        """``the compile budget of 120 s is spent (131 s compiling)``; without a budget, the
        seconds spent (``explain()`` asks either way)."""
        if self.seconds is None:
            return f"no compile budget ({self.spent:.0f} s compiling)"
        return f"the compile budget of {self.seconds:g} s is spent ({self.spent:.0f} s compiling)"


class CompileProgress:
    """A progress bar of a model's segments compiled so far, where stderr is a terminal and
    tqdm is installed (the ``sonnx.graph_mode`` log lines say when each compile starts and
    ends either way)."""

    def __init__(self) -> None:
        self._bar: Any = None

    def show(self, done: int, total: int, budget: CompileBudget) -> None:
        """Show ``done`` of ``total`` segments compiled and the budget spent."""
        if self._bar is None:
            if not sys.stderr.isatty():
                return
            try:
                from tqdm import tqdm
            except ImportError:
                return
            self._bar = tqdm(total=total, desc="sonnx graph mode", unit="graph", leave=False)
        bound = "" if budget.seconds is None else f" of {budget.seconds:g}"
        self._bar.total = total
        self._bar.n = done
        self._bar.set_postfix_str(f"{budget.spent:.0f}{bound} s compiling")
        if done >= total:
            self._bar.close()
            self._bar = None
