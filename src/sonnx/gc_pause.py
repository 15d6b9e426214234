"""Python's cyclic garbage collector paused while ``import sonnx`` loads torch and sonnx.

The collector runs a young-generation collection every 700 net allocations of container
objects, and a full one (every object in the process) whenever the older generations have
grown by a quarter. Importing torch and sonnx's ~140 modules creates hundreds of thousands of
functions, classes and dicts, almost none of them garbage, so the collector walks the growing
heap again and again: measured on our CI machines, 408 collections, three of them full (14-99
ms each), 0.22-0.29 s of a 1.8-2.4 s import, for nothing found. ``sonnx/__init__`` loads its
modules (and, through them, torch, unless the program imported it first) under
:func:`collector_paused`; reference counting still frees every object that is not part of a
cycle, and the first collection after the import finds any cycle the import left.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["collector_paused"]


@contextmanager
def collector_paused() -> Iterator[None]:
    """Disable the cyclic collector for the block; afterwards (also when the block raises)
    enable it again if it was enabled before (a program that disabled it keeps it off)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
