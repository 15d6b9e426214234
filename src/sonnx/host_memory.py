"""Host memory that stays with the process: freed tensor memory is reused, not handed back.

torch has no caching allocator on the CPU: every tensor is a ``malloc`` and every free a
``free``. glibc serves a block over its mmap threshold (128 KiB to 32 MiB) with a fresh
``mmap`` and returns it at ``free``, and hands the top of its heap back to the kernel once
more than the trim threshold is free there. The next run then touches new pages: a page
fault and the kernel zeroing each 4 KiB, every run, for every large activation. On a
DBNet-style detector at batch 8 (320x320) that was 33,000 page faults and 40 % of the run
(225 ms; 127 ms without them, onnxruntime 121 ms), and the same holds for any CNN at a large
batch or image, eager or compiled. onnxruntime avoids it with its arena.

:func:`keep_freed_memory` asks glibc (``mallopt``) to serve every block from its heap and never
to trim it, so a process keeps the memory of its largest run and reuses it: the arena's
trade (resident memory stays at its peak). It is process-wide, so ``import sonnx`` does not
call it: :func:`sonnx.tune_process_for_serving` does, for programs that opt in; the
environment variable ``SONNX_KEEP_HOST_MEMORY=0`` leaves malloc as it is even then. Elsewhere
than glibc (macOS, musl, Windows) it does nothing.

:func:`release_freed_memory` is the other way round, for one moment rather than a policy:
after :func:`sonnx.prepare` has dropped the model it loaded (its weights' bytes, now tensors),
it hands the freed memory back, unless the process chose to keep freed memory.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from functools import cache

_M_TRIM_THRESHOLD = -1  # glibc's malloc.h
_M_MMAP_MAX = -4
_INT_MAX = 2**31 - 1  # mallopt takes an int: keep up to 2 GiB free at the heap's top

_kept = False


def keep_freed_memory() -> bool:
    """Make glibc keep and reuse freed memory (see the module docstring); True where it
    applied. Idempotent; a no-op returning False where malloc is not glibc's or the user
    opted out with ``SONNX_KEEP_HOST_MEMORY=0``."""
    global _kept
    if _kept:
        return True
    if os.environ.get("SONNX_KEEP_HOST_MEMORY", "1") == "0" or not sys.platform.startswith("linux"):
        return False
    libc = _glibc()
    if libc is None:
        return False
    # mallopt returns 1 on success; kept only when both took (no mmap alone would still trim)
    _kept = bool(libc.mallopt(_M_MMAP_MAX, 0)) and bool(libc.mallopt(_M_TRIM_THRESHOLD, _INT_MAX))
    return _kept


def release_freed_memory() -> None:
    """Hand the heap's free memory back to the kernel (glibc's ``malloc_trim``), as after a
    large object is freed, unless :func:`keep_freed_memory` applied (a process that keeps its
    freed memory means to reuse it). glibc does so by itself only for blocks it served with
    ``mmap`` and for the top of its heap, so a freed model's smaller blocks would otherwise
    stay resident. Elsewhere than glibc it does nothing."""
    if _kept or not sys.platform.startswith("linux"):
        return
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)


@cache
def _glibc() -> ctypes.CDLL | None:
    """The C library when it is glibc (``gnu_get_libc_version`` only exists there)."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return None
    if not hasattr(libc, "gnu_get_libc_version") or not hasattr(libc, "mallopt"):
        return None
    libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    libc.mallopt.restype = ctypes.c_int
    return libc
