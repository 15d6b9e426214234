"""The one opt-in that tunes the whole process for running sonnx: ``import sonnx`` changes
nothing in the process (malloc, the garbage collector) until the program asks for it.

``sonnx serve``, ``sonnx demo`` and the benchmarks in ``bench/`` opt in.
"""

from __future__ import annotations

import gc

from sonnx.host_memory import keep_freed_memory

__all__ = ["tune_process_for_serving"]


def tune_process_for_serving() -> None:
    """Tune this process for running models for the rest of its life (a server, a benchmark,
    a job that does nothing else).

    What it does, process-wide:

    - **malloc keeps freed memory** (:func:`sonnx.host_memory.keep_freed_memory`, glibc's
      ``mallopt``; ``SONNX_KEEP_HOST_MEMORY=0`` in the environment leaves malloc alone, and
      other C libraries than glibc are left alone anyway). Why: torch has no caching
      allocator on the CPU and glibc hands large freed blocks back to the kernel, so every
      run of a CNN at a large batch or image faults in fresh zeroed pages for its
      activations (a DBNet-style detector at batch 8: 33,000 page faults, 40 % of the run).
    - **the collector stops walking what is alive now** (``gc.freeze()``: torch's, sonnx's
      and the program's objects, the models prepared so far among them, move to the
      collector's permanent generation). Why: a full collection walks every object in the
      process; after ``import sonnx`` that is ~175,000 objects and 46 ms (measured here),
      a stall for whichever run it lands on; frozen, it took 0.1 ms.

    The price, and why it is not the default: resident memory stays at the peak of the
    largest run, and frozen objects are never collected as cyclic garbage (reference counting
    still frees the rest). A notebook, a library, or a training job that embeds sonnx beside
    other work should not call it.

    When: once, after importing and preparing the models and before serving or timing.
    Objects created later are collected as usual; calling it again freezes them too, and sets
    malloc's options only the first time.
    """
    keep_freed_memory()
    gc.freeze()
