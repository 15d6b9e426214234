"""The process that runs fuzz cases, one at a time, for :mod:`tests.fuzz.run`.

Run as ``python -m tests.fuzz.worker``. It reads length-prefixed pickled requests
``(source, feeds)`` from stdin (``source`` is model bytes or a path) and answers each with one
JSON line on its own copy of stdout: ``{"outcome": "ok" | "typed" | "untyped", "error": class
name, "message": ..., "where": the last frames}``. Everything else the process prints goes to
stderr, so nothing it runs can corrupt the answers. A case that hangs or kills the process is
noticed by the parent, which kills and replaces the worker.
"""

from __future__ import annotations

import json
import os
import pickle
import struct
import sys
import traceback
import warnings
from typing import Any, BinaryIO

LIMIT_BYTES = 256 << 20  # the fuzz cases' memory guard: a small model needs far less
DATA_LIMIT_BYTES = 6 << 30  # the worker's heap, so an unguarded huge allocation fails fast
LOOP_LIMIT = 10_000  # the seeds' loops run 3 times; an endless one fails in well under 10 s


def _run(source: Any, feeds: dict[str, Any]) -> dict[str, str]:
    import sonnx
    from sonnx.errors import SonnxError
    from sonnx.tensor import Tensor

    try:
        rep = sonnx.prepare(source)
        outputs = rep.run(feeds)
        for out in outputs:
            if isinstance(out, Tensor):
                out.numpy()
    except SonnxError as e:
        return {"outcome": "typed", "error": type(e).__name__, "message": str(e)[:2000]}
    except Exception as e:
        frames = traceback.format_exception(e)
        return {
            "outcome": "untyped",
            "error": type(e).__name__,
            "message": str(e)[:2000],
            "where": "".join(frames[-6:])[-4000:],
        }
    return {"outcome": "ok", "error": "", "message": ""}


def _read(stream: BinaryIO) -> Any:
    header = stream.read(4)
    if len(header) < 4:
        return None
    (size,) = struct.unpack("<I", header)
    return pickle.loads(stream.read(size))


def main() -> None:
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # stray prints go to stderr
    os.environ.setdefault("SONNX_MAX_TENSOR_BYTES", str(LIMIT_BYTES))
    os.environ.setdefault("SONNX_MAX_LOOP_ITERATIONS", str(LOOP_LIMIT))
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_DATA, (DATA_LIMIT_BYTES, DATA_LIMIT_BYTES))
    except (ImportError, ValueError, OSError):
        pass  # not POSIX: the memory guard alone bounds allocations
    warnings.simplefilter("ignore")
    import sonnx  # noqa: F401  (imported before the first case is timed)

    answers.write("ready\n")
    while True:
        request = _read(sys.stdin.buffer)
        if request is None:
            return
        source, feeds = request
        answers.write(json.dumps(_run(source, feeds)) + "\n")


if __name__ == "__main__":
    main()
