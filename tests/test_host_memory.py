"""sonnx.host_memory: freed tensor memory is kept and reused, unless the user opts out.

Each case runs in a fresh interpreter: the malloc settings are process-wide and one-way.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

glibc_linux = pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.confstr("CS_GNU_LIBC_VERSION") is None,
    reason="mallopt is glibc's (other C libraries keep their own defaults)",
)

# Allocates and frees a 32 MiB tensor (over glibc's largest mmap threshold) several times and
# reports whether sonnx applied the settings and the page faults of the last allocations.
_PROBE = """
import json, resource
import sonnx, torch
from sonnx import host_memory
faults = []
for _ in range(6):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    torch.empty(8 * 2**20).fill_(1.0)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps({"kept": host_memory._kept, "faults": faults[3:]}))
"""


def _probe(**env: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@glibc_linux
def test_import_keeps_freed_memory_so_a_repeated_allocation_touches_no_new_pages():
    kept = _probe()
    assert kept["kept"] is True
    # the 8192 pages of each allocation are the heap's own after the first time
    assert max(kept["faults"]) < 100, kept
    given_back = _probe(SONNX_KEEP_HOST_MEMORY="0")
    assert given_back["kept"] is False
    # glibc returns such a block at free, so the next one faults its pages in again (4 KiB
    # pages, or 2 MiB ones where the kernel uses transparent huge pages for the mapping)
    assert min(given_back["faults"]) >= 16, given_back


def test_keep_freed_memory_is_idempotent():
    from sonnx.host_memory import keep_freed_memory

    first = keep_freed_memory()
    assert keep_freed_memory() is first
