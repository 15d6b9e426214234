"""The model repository: ``<root>/<model>/<version>/model.onnx`` (+ ``<model>/config.json``).

The layout is Triton's, so an existing Triton ONNX repository serves as it is. Each model is
loaded in a thread (``prepare`` can take seconds) while the server keeps answering; a reload
prepares the new versions first and swaps them in, so requests never see a half-loaded model,
and the replaced versions finish their queued requests before their batchers stop. A model
that fails to load is kept with the reason, which ``/v2/repository/index`` and every request
for it report; a load request answers it as an error. A reload that fails leaves the versions
already serving unchanged, as Triton's does.

Readiness is Triton's strict readiness by default: the server is ready once the start-up load
has finished and every model it knows serves. ``strict_readiness=False`` only waits for the
start-up load, so that one bad directory does not keep the other models out of service.

Each version is prepared once: its ``instance_count`` worker threads share the one
:class:`~sonnx.runtime.rep.SingaRep` (which runs inference in several threads at once), and so
does the generate API for a decoder (:mod:`sonnx.serve.generate_api`), so the weights are in
memory once per version.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from sonnx import tensor
from sonnx.errors import SonnxError
from sonnx.runtime.rep import SingaRep, prepare
from sonnx.serve.batcher import Arrays, Batcher, BatchPolicy, RunFn
from sonnx.serve.checkpoints import CHECKPOINT_FILE, checkpoint_to_onnx
from sonnx.serve.config import ModelConfig, load_config
from sonnx.serve.errors import (
    ConfigError,
    InvalidRequestError,
    ModelLoadError,
    ModelNotFoundError,
    ModelRunError,
    ModelUnavailableError,
)
from sonnx.serve.metrics import ServeMetrics
from sonnx.serve.signature import ModelSignature

MODEL_FILE = "model.onnx"
CONFIG_FILE = "config.json"
log = logging.getLogger("sonnx.serve")


@dataclass(eq=False)
class ModelVersion:
    """One served version: what it accepts, its prepared model and the batcher that runs it.

    ``closers`` run when the version is retired (``retired`` is then True), after its batcher
    has finished (the generate API adds its decode scheduler's). Versions compare and hash by
    identity: a reload makes new ones.
    """

    name: str
    version: int
    config: ModelConfig
    signature: ModelSignature
    rep: SingaRep
    batcher: Batcher
    closers: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    retired: bool = False

    async def close(self) -> None:
        """Finish the queued requests, then stop."""
        self.retired = True
        await self.batcher.close()
        for close in self.closers:
            await close()

    async def infer(self, inputs: Arrays, timeout_s: float | None, received: float) -> Arrays:
        """Run ``inputs`` through the batcher; every output by name. The deadline is the
        model's ``request_timeout_ms`` or the request's ``timeout_s`` if shorter, counted
        from ``received`` (a :func:`time.perf_counter` reading)."""
        timeout = self.config.request_timeout_ms / 1e3
        if timeout_s is not None:
            timeout = min(timeout, timeout_s)
        loop = asyncio.get_running_loop()
        deadline = loop.time() - (time.perf_counter() - received) + timeout
        return await self.batcher.submit(inputs, deadline)


@dataclass
class ModelEntry:
    """A model directory's state: READY (``versions`` serve), LOADING or UNAVAILABLE."""

    name: str
    state: str = "LOADING"
    reason: str = ""
    versions: dict[int, ModelVersion] = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class ModelRepository:
    """Loads, serves and unloads the models under ``root``. Use it inside the event loop."""

    def __init__(self, root: Path, metrics: ServeMetrics, *, strict_readiness: bool = True) -> None:
        if not root.is_dir():
            raise ConfigError(f"model repository {root} is not a directory")
        self.root = root
        self.strict_readiness = strict_readiness
        self._metrics = metrics
        self._entries: dict[str, ModelEntry] = {}
        self.loaded_all = False

    # ---- looking models up --------------------------------------------------------------
    def on_disk(self) -> list[str]:
        """Model directory names (hidden directories are skipped)."""
        return sorted(
            p.name for p in self.root.iterdir() if p.is_dir() and not p.name.startswith(".")
        )

    def get(self, name: str, version: str | None = None) -> ModelVersion:
        """The version to serve (the newest loaded one by default), or the error to answer."""
        entry = self._entries.get(name)
        if entry is None:
            if name in self.on_disk():
                raise ModelNotFoundError(
                    f"model {name!r} is not loaded; load it with POST "
                    f"/v2/repository/models/{name}/load"
                )
            raise ModelNotFoundError(f"unknown model {name!r}; the repository has {self.on_disk()}")
        if not entry.versions:
            if entry.state == "LOADING":
                raise ModelUnavailableError(f"model {name!r} is loading")
            raise InvalidRequestError(f"model {name!r} is not available: {entry.reason}")
        if version is None:
            return entry.versions[max(entry.versions)]
        if not version.isdigit() or int(version) not in entry.versions:
            raise ModelNotFoundError(
                f"model {name!r} has no version {version!r} loaded; loaded versions are "
                f"{[str(v) for v in sorted(entry.versions)]}"
            )
        return entry.versions[int(version)]

    def versions(self, name: str) -> list[str]:
        """The loaded versions of ``name``, oldest first."""
        entry = self._entries.get(name)
        return [str(v) for v in sorted(entry.versions)] if entry else []

    def known(self, name: str) -> bool:
        return name in self._entries

    @property
    def ready(self) -> bool:
        """True once the start-up load has finished and, with strict readiness (the default),
        every known model serves; :meth:`unavailable` names those that do not."""
        if not self.loaded_all:
            return False
        return not (self.strict_readiness and self.unavailable())

    def unavailable(self) -> list[str]:
        """The known models (loaded at start-up or by a load request) that serve no version:
        failed to load, or loading."""
        return sorted(name for name, entry in self._entries.items() if not entry.versions)

    def index(self, ready_only: bool = False) -> list[dict[str, str]]:
        """One row per served version, or per model that is not serving, with its state."""
        rows = []
        for name in sorted(set(self.on_disk()) | set(self._entries)):
            entry = self._entries.get(name)
            if entry is None:
                rows.append({"name": name, "state": "UNAVAILABLE", "reason": "not loaded"})
            elif entry.versions:
                rows += [
                    {"name": name, "version": str(v), "state": entry.state, "reason": entry.reason}
                    for v in sorted(entry.versions)
                ]
            else:
                rows.append({"name": name, "state": entry.state, "reason": entry.reason})
        return [r for r in rows if r["state"] == "READY"] if ready_only else rows

    # ---- loading and unloading ----------------------------------------------------------
    async def load_all(self) -> None:
        """Load every model on disk, one after another (each in a worker thread)."""
        for name in self.on_disk():
            await self.load(name)
        self.loaded_all = True

    async def load(self, name: str, *, strict: bool = False) -> None:
        """(Re)load ``name`` from disk. A failure is recorded on the model (a failed reload
        keeps the versions already serving) and raised only when ``strict``.

        :param name: the model directory's name.
        :param strict: raise a failure instead of only recording it (a load request).
        :raises ModelNotFoundError: ``name`` is not in the repository.
        :raises ModelLoadError: with ``strict``, the model failed to load; the text says why.
        """
        if name not in self.on_disk():
            raise ModelNotFoundError(f"unknown model {name!r}; the repository has {self.on_disk()}")
        entry = self._entries.setdefault(name, ModelEntry(name))
        async with entry.lock:
            self._entries[name] = entry  # an unload may have dropped it while we waited
            if not entry.versions:
                entry.state = "LOADING"
            try:
                prepared = await asyncio.to_thread(_prepare_model, self.root / name)
            except Exception as e:  # any failure leaves the server up and says why
                reason = _failed(name, entry, e)
                if strict:
                    raise ModelLoadError(reason) from None
                return
            old = dict(entry.versions)
            entry.versions = {
                version: self._serve(name, version, config, signature, rep)
                for version, config, signature, rep in prepared
            }
            entry.state, entry.reason = "READY", ""
            await self._retire(entry, old)
            log.info("model %r ready, versions %s", name, sorted(entry.versions))

    async def unload(self, name: str) -> None:
        """Stop serving ``name``; its queued and running requests still finish."""
        entry = self._entries.get(name)
        if entry is None:
            if name in self.on_disk():
                return
            raise ModelNotFoundError(f"unknown model {name!r}; the repository has {self.on_disk()}")
        async with entry.lock:
            del self._entries[name]
            await self._retire(entry, entry.versions)
        log.info("model %r unloaded", name)

    async def close(self) -> None:
        """Unload everything (at server shutdown, after the last connection closed)."""
        for name in list(self._entries):
            await self.unload(name)

    async def _retire(self, entry: ModelEntry, versions: dict[int, ModelVersion]) -> None:
        await asyncio.gather(*(v.close() for v in versions.values()))

    def _serve(
        self,
        name: str,
        version: int,
        config: ModelConfig,
        signature: ModelSignature,
        rep: SingaRep,
    ) -> ModelVersion:
        policy = BatchPolicy(
            max_batch_size=config.max_batch_size,
            max_queue_delay_s=config.max_queue_delay_ms / 1e3,
            max_queue_size=config.max_queue_size,
            instance_count=config.instance_count,
            padded=config.padded_batches,
        )
        batcher = Batcher(name, _runner(name, rep), policy, self._metrics.observer(name))
        return ModelVersion(name, version, config, signature, rep, batcher)


def _failed(name: str, entry: ModelEntry, error: Exception) -> str:
    """Record a failed (re)load on ``entry``; the reason a load request answers."""
    if entry.versions:  # a reload: what served before still serves
        served = sorted(entry.versions)
        reason = f"model {name!r} failed to reload, still serving versions {served}: {error}"
        entry.state, entry.reason = "READY", reason
    else:
        reason = f"model {name!r} failed to load: {error}"
        entry.state, entry.reason = "UNAVAILABLE", str(error)
    log.error("%s", reason)
    return reason


def _prepare_model(folder: Path) -> list[tuple[int, ModelConfig, ModelSignature, SingaRep]]:
    """Read the config and prepare each selected version (in a worker thread)."""
    config = load_config(folder / CONFIG_FILE)
    found = sorted(
        int(p.name)
        for p in folder.iterdir()
        if p.is_dir()
        and p.name.isdigit()
        and ((p / MODEL_FILE).is_file() or (p / CHECKPOINT_FILE).is_file())
    )
    if not found:
        raise ConfigError(
            f"{folder}: no version directory (1/, 2/, ...) holds {MODEL_FILE} or {CHECKPOINT_FILE}"
        )
    if config.versions == "latest":
        chosen = [found[-1]]
    elif config.versions == "all":
        chosen = found
    else:
        missing = [v for v in config.versions if v not in found]
        if missing:
            raise ConfigError(
                f"{folder / CONFIG_FILE}: versions {missing} not found; on disk: {found}"
            )
        chosen = list(config.versions)
    prepared = []
    for version in chosen:
        rep = _prepared_version(folder / str(version), config, str(folder / CONFIG_FILE))
        # the kept model has every input, output and initializer name the signature reads
        signature = ModelSignature.from_model(rep.model, config)
        prepared.append((version, config, signature, rep))
    return prepared


def _prepared_version(directory: Path, config: ModelConfig, where: str) -> SingaRep:
    """The prepared model of one version: its ``model.onnx``, or its checkpoint's export.

    The file goes to ``prepare`` by its path, so each weight is read from it straight into
    its tensor rather than held in a parsed model besides."""
    model_file = directory / MODEL_FILE
    source = (
        model_file
        if model_file.is_file()
        else checkpoint_to_onnx(directory / CHECKPOINT_FILE, config, where)
    )
    return prepare(source, device=config.device, use_graph=config.use_graph)


def _runner(name: str, rep: SingaRep) -> RunFn:
    """The batcher's run function: the arrays through ``rep``, outputs back as NumPy by name.
    Every instance's thread runs the same prepared model (a SingaRep runs in several threads
    at once, each run's results those of the run alone).

    IndexError and ValueError from torch come from the values of a valid-looking request (a
    token id past the vocabulary), so they are the client's 400, not the server's 500.
    """

    def run(index: int, inputs: Arrays) -> Arrays:
        try:
            with torch.no_grad():
                outputs = rep.run(inputs)
        except (IndexError, ValueError) as e:
            if isinstance(e, SonnxError):
                raise
            raise ModelRunError(
                f"model {name!r} cannot run this request: {type(e).__name__}: {e}"
            ) from e
        return {name: tensor.to_numpy(t) for name, t in zip(rep.outputs, outputs, strict=True)}

    return run
