"""Which compiles are under way, so that a second thread does not start the same one.

A server's threads share one prepared model. Its first requests arrive together, each finds no
graph for its segment yet, and each would compile the same graph: minutes of both cores spent
several times over, for one library. The first thread to claim a segment's store key compiles
it; a thread finding the key claimed runs that segment eagerly this once (no waiting: its
request is answered now) and finds the graph on a later run.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["CompileClaims"]


class CompileClaims:
    """The store keys whose graphs some thread is finding, loading or compiling now."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: set[str] = set()

    @contextmanager
    def claim(self, key: str) -> Iterator[bool]:
        """Claim ``key`` for the block: yields True where this thread holds it (and releases
        it after the block), False where another thread does.

        :param key: a segment's store key.
        :returns: the context, yielding whether the claim was granted.
        """
        with self._lock:
            granted = key not in self._held
            if granted:
                self._held.add(key)
        try:
            yield granted
        finally:
            if granted:
                with self._lock:
                    self._held.discard(key)
