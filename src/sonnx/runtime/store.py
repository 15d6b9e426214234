"""Compiled graphs kept on disk: a new process's first run of a model seen before loads them.

Graph mode compiles each segment into a shared library (:mod:`sonnx.runtime.compiled_graphs`);
the store keeps it under a digest of everything its code depends on, so the next process that
runs the same segment of the same model finds it by computing the digest, with no trace and no
compile. The digest covers the model's graph, the segment's bounds, its inputs' ranks, dtypes
and devices and any shape values baked into it, the current bytes of every constant it reads
(a training step or ``load_states`` changes them, and so the digest), and the environment the
code was generated for: torch's version, sonnx's own source, the thread count inductor
compiled its loops for and the CPU's instruction-set flags.

Where: ``$SONNX_CACHE_DIR``, by default ``$XDG_CACHE_HOME/sonnx`` (``~/.cache/sonnx``);
``SONNX_CACHE_DIR=off`` keeps compiled graphs in memory only. Layout::

    graphs/<digest>/<entry>/graph.so    one compiled graph (kernels, launcher)
    graphs/<digest>/<entry>/constants.pt  where its constants come from (the model's
                                        weights by name; what the compile computed)
    graphs/<digest>/<entry>/guards.txt  the inputs it serves (several entries: several shapes)
    graphs/<digest>/<entry>/graph.json  its custom-op calls, where it has any
    graphs/<digest>/<entry>/checks.json the input sizes its runs were checked at against the
                                        eager steps (absent: not yet; checked at its first run)
    plans/<model digest>.json           the steps graph mode found must run eagerly

Only graphs of a model's weights as loaded are stored: after a training step or
``load_states`` in the same process, graph mode compiles into memory only (a training loop
evaluating in graph mode would otherwise store a copy of the weights per evaluation).
Nothing is ever half-written: an entry is compiled in a temporary directory and renamed into
place whole, a plan is written to a temporary file and replaced. Entries are never deleted by
sonnx; removing the directory is always safe.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import tempfile
import uuid
import warnings
from collections.abc import Callable, Iterable, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import onnx
import torch

from sonnx.runtime.compiled_graphs import Checks, CompiledGraph, admits, load_library
from sonnx.runtime.library_constants import SOURCES_FILE, LibraryWeights

ENV_VAR = "SONNX_CACHE_DIR"
_LIBRARY = "graph.so"
#: The library's custom-op calls, which its runner reads beside it (onnxruntime's kernels).
_EXTERN_CALLS = "graph.json"
_GUARDS = "guards.txt"
_CHECKS = "checks.json"


def store_root() -> Path | None:
    """Where compiled graphs are kept (``$SONNX_CACHE_DIR``), or None when that is ``off``."""
    configured = os.environ.get(ENV_VAR)
    if configured is not None:
        return None if configured.strip().lower() in ("", "0", "off", "none") else Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sonnx"


@cache
def environment_digest() -> str:
    """What generated code depends on besides the model: torch, sonnx's source, the CPU."""
    h = hashlib.blake2b(digest_size=16)
    h.update(torch.__version__.encode())
    package = Path(__file__).resolve().parents[1]
    for source in sorted(package.rglob("*.py")):
        h.update(str(source.relative_to(package)).encode())
        h.update(source.read_bytes())
    h.update(platform.machine().encode())
    h.update(_cpu_flags().encode())
    return h.hexdigest()


def _cpu_flags() -> str:
    """The CPU's instruction-set flags (inductor vectorises for the best it finds)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            return next((line for line in info if line.startswith("flags")), "")
    except OSError:
        return platform.processor()


def graph_digest(graph: onnx.GraphProto, opsets: dict[str, int]) -> str:
    """A digest of a model's graph without its initializers' values (those are hashed per
    compiled segment, as the tensors they are when it compiles)."""
    h = hashlib.blake2b(digest_size=16)
    h.update(json.dumps(sorted(opsets.items())).encode())
    for value in [*graph.input, *graph.output]:
        h.update(value.SerializeToString())
    for init in graph.initializer:
        h.update(f"{init.name}:{init.data_type}:{list(init.dims)}".encode())
    for node in graph.node:
        h.update(node.SerializeToString())
    return h.hexdigest()


class WeightDigests:
    """Digests of tensors' bytes, each computed once per tensor version.

    SHA-256, not the BLAKE2 of the other digests here: the SHA extensions of current x86 and
    ARM CPUs hash 1.5 GB/s on our CI machines against BLAKE2b's 0.55 GB/s, and a new process
    hashes every weight a stored graph froze in before it can load it (ResNet-50's 100 MB:
    0.07 s instead of 0.19 s of its first run).
    """

    def __init__(self) -> None:
        self._known: dict[tuple[int, int, int], str] = {}

    def of(self, data: Any) -> str:
        if not isinstance(data, torch.Tensor):  # a string constant
            return hashlib.blake2b(repr(data).encode(), digest_size=16).hexdigest()
        key = (id(data), data._version, data.data_ptr())
        known = self._known.get(key)
        if known is None:
            flat = data.detach().cpu().contiguous().reshape(-1)
            h = hashlib.sha256(f"{data.dtype}{tuple(data.shape)}".encode())
            h.update(flat.view(torch.uint8).numpy() if flat.numel() else b"")
            known = self._known[key] = h.hexdigest()
        return known


def digest(parts: Iterable[Any]) -> str:
    """One digest of ``parts`` (their reprs) and the environment, the thread count included
    (inductor's loops are compiled for the number of threads torch uses when they compile)."""
    h = hashlib.blake2b(environment_digest().encode(), digest_size=20)
    h.update(f"threads={torch.get_num_threads()}\0".encode())
    for part in parts:
        h.update(repr(part).encode())
        h.update(b"\0")
    return h.hexdigest()


class GraphStore:
    """Compiled graphs by digest, on disk under ``root`` (or, with no root, nowhere: each
    graph is compiled into a temporary directory that is gone once the library is loaded)."""

    def __init__(self, root: Path | None) -> None:
        self.root = root

    @classmethod
    def from_environment(cls) -> GraphStore:
        return cls(store_root())

    def find(
        self,
        key: str,
        inputs: Sequence[torch.Tensor],
        versions: tuple[Any, ...],
        device: torch.device,
        weights: LibraryWeights | None = None,
    ) -> CompiledGraph | None:
        """A stored graph for ``key`` whose guards admit ``inputs``, loaded (reading
        ``weights``: see :func:`~sonnx.runtime.compiled_graphs.load_library`); or None."""
        if self.root is None:
            return None
        folder = self.root / "graphs" / key
        if not folder.is_dir():
            return None
        for entry in sorted(folder.iterdir()):
            try:
                guards = (entry / _GUARDS).read_text(encoding="utf-8")
                if admits(guards, inputs):
                    run = load_library(entry / _LIBRARY, device, weights)
                    checks = read_checks(entry)
                    return CompiledGraph(versions, guards, run, True, entry / _LIBRARY, checks)
            except Exception as e:  # an unreadable entry is skipped: the graph compiles again
                warnings.warn(
                    f"graph mode ignores the stored graph {entry}: {e}", RuntimeWarning, 3
                )
        return None

    def compile(
        self,
        key: str,
        build: Callable[[Path], str],
        versions: tuple[Any, ...],
        device: torch.device,
        keep: bool = True,
        weights: LibraryWeights | None = None,
    ) -> CompiledGraph:
        """``build(library)`` compiles a graph into the file ``library`` and returns its
        guards; the graph is stored under ``key`` (unless not to ``keep``) and returned
        loaded."""
        root = self.root if keep else None
        try:
            if root is not None:
                (root / "graphs").mkdir(parents=True, exist_ok=True)
            scratch = Path(
                tempfile.mkdtemp(
                    prefix=".compiling-", dir=None if root is None else root / "graphs"
                )
            )
        except OSError as e:  # a read-only or misnamed store: compile, keep in memory
            warnings.warn(
                f"graph mode cannot store compiled graphs in {root} ({e}); set ${ENV_VAR} to "
                "a writable directory, or to 'off'",
                RuntimeWarning,
                3,
            )
            self.root = root = None
            scratch = Path(tempfile.mkdtemp(prefix=".compiling-"))
        try:
            guards = build(scratch / _LIBRARY)
            for extra in scratch.iterdir():  # inductor's generated sources and objects
                if extra.name not in (_LIBRARY, SOURCES_FILE, _EXTERN_CALLS):
                    shutil.rmtree(extra) if extra.is_dir() else extra.unlink()
            (scratch / _GUARDS).write_text(guards, encoding="utf-8")
            if root is None:
                run = load_library(scratch / _LIBRARY, device, weights)
                return CompiledGraph(versions, guards, run)
            entry = root / "graphs" / key / uuid.uuid4().hex
            entry.parent.mkdir(exist_ok=True)
            scratch.rename(entry)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        library = entry / _LIBRARY
        run = load_library(library, device, weights)
        return CompiledGraph(versions, guards, run, library=library)

    def usage(self) -> tuple[int, int]:
        """How many compiled graphs are stored, and their bytes on disk."""
        if self.root is None or not (self.root / "graphs").is_dir():
            return 0, 0
        entries = [e for e in (self.root / "graphs").glob("*/*") if e.is_dir()]
        size = sum(f.stat().st_size for e in entries for f in e.iterdir() if f.is_file())
        return len(entries), size

    def clear(self) -> tuple[int, int]:
        """Delete every stored graph and plan (safe at any time: graphs already loaded by a
        running process stay loaded); returns how many files went, and their bytes."""
        files = size = 0
        if self.root is not None:
            for part in ("graphs", "plans"):
                found = [f for f in (self.root / part).rglob("*") if f.is_file()]
                files += len(found)
                size += sum(f.stat().st_size for f in found)
                shutil.rmtree(self.root / part, ignore_errors=True)
        return files, size

    def load_plan(self, model: str) -> dict[int, str]:
        """The steps a model's graph mode found must run eagerly, by index, with why."""
        if self.root is None:
            return {}
        try:
            text = (self.root / "plans" / f"{digest([model])}.json").read_text(encoding="utf-8")
            return {int(index): str(why) for index, why in json.loads(text).items()}
        except (OSError, ValueError, AttributeError):
            return {}

    def save_plan(self, model: str, eager_steps: dict[int, str]) -> None:
        if self.root is None:
            return
        folder = self.root / "plans"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            fd, scratch = tempfile.mkstemp(prefix=".writing-", dir=folder)
        except OSError:  # an unwritable store: the plan is found again by tracing
            return
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump({str(i): why for i, why in sorted(eager_steps.items())}, out)
        os.replace(scratch, folder / f"{digest([model])}.json")


def read_checks(entry: Path) -> Checks:
    """What the runs of the graph stored in ``entry`` were checked at (nothing, where no
    process recorded a check or the record is unreadable: its next run is checked).

    :param entry: the graph's folder in the store.
    :returns: the checks.
    """
    try:
        recorded = json.loads((entry / _CHECKS).read_text(encoding="utf-8"))
        first = recorded["first"]
        sizes = None if first is None else tuple(tuple(int(d) for d in s) for s in first)
        return Checks(sizes, bool(recorded["again"]))
    except (OSError, ValueError, KeyError, TypeError):
        return Checks()


def record_checks(graph: CompiledGraph) -> None:
    """Write what ``graph``'s runs were checked at beside its stored library, whole (nothing
    for a graph kept in memory only, or one whose entry is gone).

    :param graph: the graph.
    """
    if graph.library is None or not graph.library.parent.is_dir():
        return
    record = {"first": graph.checks.first, "again": graph.checks.again}
    target = graph.library.parent / _CHECKS
    try:
        with tempfile.NamedTemporaryFile(
            "w", encoding="utf-8", dir=target.parent, suffix=".tmp", delete=False
        ) as f:
            json.dump(record, f)
        os.replace(f.name, target)
    except OSError as e:  # a read-only store: the next process checks the graph again
        warnings.warn(f"graph mode cannot record checks in {target.parent}: {e}", RuntimeWarning, 2)
