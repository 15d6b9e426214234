"""A model's serving configuration: ``<repository>/<model>/config.json``.

Every key is optional; the defaults serve the newest version one request at a time. Unknown
keys and wrong types are errors (reported when the model loads, naming the file and key), so a
typo such as ``max_batchsize`` never silently leaves batching off.

.. code-block:: json

    {"max_batch_size": 32, "max_queue_delay_ms": 2, "max_queue_size": 64,
     "instance_count": 1, "device": "cpu", "use_graph": false,
     "request_timeout_ms": 30000, "versions": "latest",
     "inputs": {"input": {"shape": [-1, 3, 224, 224]}}}

``max_batch_size`` 0 (the default) turns dynamic batching off. It is opt-in because torch picks
kernels by batch size: a batched result may differ from the one-by-one result in the last bits
(about 1e-7 for a float32 CNN). ``"padded_batches": true`` runs every batch, merged or single,
at ``max_batch_size`` rows, which makes each result bit-identical whatever it was merged with,
at the cost of computing blank rows under light load. ``inputs`` / ``outputs`` override the
shapes the model declares (``-1`` for any size): they may fix a dynamic dim (the server then
rejects other sizes) or give an output a shape the model leaves unknown, but never change a
fixed dim.

A version directory may hold a sonnx checkpoint (``model.sonnx``) instead of ``model.onnx``:
``model_class`` then names the class that reads it, ``inputs`` give the input shapes and an
input spec may add ``"datatype"`` (KServe name, default FP32); see
:mod:`sonnx.serve.checkpoints`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sonnx.serve.datatypes import DATATYPES
from sonnx.serve.errors import ConfigError

Shape = tuple[int, ...]


@dataclass(frozen=True)
class ModelConfig:
    """The validated contents of one ``config.json`` (or the defaults when there is none).

    Each field is the ``config.json`` key of that name, except ``input_datatypes``.

    :param max_batch_size: merge concurrent requests along dim 0 up to this many rows; 0 (the
        default) turns dynamic batching off.
    :param max_queue_delay_ms: how long a batch waits for more requests, >= 0.
    :param max_queue_size: requests waiting per model, >= 1; a full queue answers 503 with
        ``Retry-After``.
    :param instance_count: worker threads running the model, >= 1 (one prepared model serves
        them all).
    :param device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ...
    :param use_graph: run in compiled graph mode (``prepare(..., use_graph=True)``).
    :param padded_batches: run every batch at ``max_batch_size`` rows (needs
        ``max_batch_size``), so each result is bit-identical whatever it was merged with.
    :param request_timeout_ms: the deadline per request (504 over HTTP, ``DEADLINE_EXCEEDED``
        over gRPC).
    :param versions: ``"latest"``, ``"all"`` or the version numbers to serve (sorted).
    :param inputs: input shapes by name (``-1`` for any size) overriding the model's: they may
        fix a dynamic dim, never change a fixed one.
    :param outputs: output shapes by name, for outputs the model leaves without one.
    :param model_class: ``"package.module:ClassName"``, the class that reads a sonnx
        checkpoint (``model.sonnx``).
    :param input_datatypes: KServe datatypes by input name, from ``inputs``' ``"datatype"``
        entries (checkpoints; default FP32).
    """

    max_batch_size: int = 0
    max_queue_delay_ms: float = 1.0
    max_queue_size: int = 64
    instance_count: int = 1
    device: str = "cpu"
    use_graph: bool = False
    padded_batches: bool = False
    request_timeout_ms: float = 30_000.0
    versions: str | tuple[int, ...] = "latest"
    inputs: dict[str, Shape] = field(default_factory=dict)
    outputs: dict[str, Shape] = field(default_factory=dict)
    model_class: str | None = None
    input_datatypes: dict[str, str] = field(default_factory=dict)

    @property
    def batching(self) -> bool:
        """Whether dynamic batching is on (``max_batch_size`` above 0)."""
        return self.max_batch_size > 0


_INTS = {"max_batch_size": 0, "max_queue_size": 1, "instance_count": 1}
_FLOATS = {"max_queue_delay_ms": 0.0, "request_timeout_ms": 1e-3}


def load_config(path: Path) -> ModelConfig:
    """The config in ``path``, or the defaults if the file does not exist.

    :param path: the model's ``config.json``.
    :returns: the validated configuration.
    :raises ConfigError: the file is not valid JSON, or :func:`parse_config` rejects it.
    """
    if not path.is_file():
        return ModelConfig()
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: not valid JSON ({e})") from None
    return parse_config(raw, str(path))


def parse_config(raw: Any, where: str = "config.json") -> ModelConfig:
    """Validate a decoded ``config.json`` object into a :class:`ModelConfig`.

    :param raw: the decoded JSON.
    :param where: the file's name, for the messages.
    :returns: the validated configuration.
    :raises ConfigError: not a JSON object, an unknown key, a value of the wrong type or
        below its minimum, ``padded_batches`` without ``max_batch_size``, bad ``versions``,
        a shape spec that is not ``{"shape": [ints]}``, or an unknown input datatype. Its
        message names ``where`` and the key.
    """
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: expected a JSON object, received {type(raw).__name__}")
    known = set(ModelConfig.__dataclass_fields__) - {"input_datatypes"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; known keys are {sorted(known)}")
    values: dict[str, Any] = {}
    for key, minimum in _INTS.items():
        if key in raw:
            values[key] = _number(raw[key], key, where, int, minimum)
    for key, minimum in _FLOATS.items():
        if key in raw:
            values[key] = _number(raw[key], key, where, float, minimum)
    if "device" in raw:
        if not isinstance(raw["device"], str):
            raise ConfigError(f"{where}: 'device' must be a string such as 'cpu' or 'cuda:0'")
        values["device"] = raw["device"]
    for key in ("use_graph", "padded_batches"):
        if key in raw:
            if not isinstance(raw[key], bool):
                raise ConfigError(f"{where}: {key!r} must be true or false")
            values[key] = raw[key]
    if values.get("padded_batches") and not values.get("max_batch_size"):
        raise ConfigError(f"{where}: 'padded_batches' needs a 'max_batch_size' above 0")
    if "versions" in raw:
        values["versions"] = _versions(raw["versions"], where)
    for key in ("inputs", "outputs"):
        if key in raw:
            values[key] = _shapes(raw[key], key, where)
    if "inputs" in raw:
        values["input_datatypes"] = _datatypes(raw["inputs"], where)
    if "model_class" in raw:
        if not isinstance(raw["model_class"], str):
            raise ConfigError(f"{where}: 'model_class' must be a string \"module:ClassName\"")
        values["model_class"] = raw["model_class"]
    return ModelConfig(**values)


def _datatypes(value: Mapping[str, Any], where: str) -> dict[str, str]:
    found = {n: spec["datatype"] for n, spec in value.items() if "datatype" in spec}
    for name, datatype in found.items():
        if datatype not in DATATYPES or datatype == "BYTES":
            raise ConfigError(
                f"{where}: inputs.{name}.datatype must be one of "
                f"{sorted(set(DATATYPES) - {'BYTES'})}, received {datatype!r}"
            )
    return found


def _number(value: Any, key: str, where: str, kind: type, minimum: float) -> Any:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is int:
        ok = ok and float(value).is_integer()
    if not ok or value < minimum:
        what = "an integer" if kind is int else "a number"
        raise ConfigError(f"{where}: {key!r} must be {what} >= {minimum}, received {value!r}")
    return kind(value)


def _versions(value: Any, where: str) -> str | tuple[int, ...]:
    if value in ("latest", "all"):
        return value
    if (
        isinstance(value, list)
        and value
        and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)
    ):
        return tuple(sorted(set(value)))
    raise ConfigError(
        f'{where}: \'versions\' must be "latest", "all" or a non-empty list of positive '
        f"integers, received {value!r}"
    )


def _shapes(value: Any, key: str, where: str) -> dict[str, Shape]:
    if not isinstance(value, Mapping):
        raise ConfigError(f'{where}: {key!r} must map tensor names to {{"shape": [...]}}')
    shapes: dict[str, Shape] = {}
    for name, spec in value.items():
        shape = spec.get("shape") if isinstance(spec, Mapping) else None
        allowed = {"shape", "datatype"} if key == "inputs" else {"shape"}
        extra = sorted(set(spec) - allowed) if isinstance(spec, Mapping) else []
        valid = isinstance(shape, list) and all(
            isinstance(d, int) and not isinstance(d, bool) and d >= -1 for d in shape
        )
        if not valid or extra:
            raise ConfigError(
                f'{where}: {key}.{name} must be {{"shape": [ints, -1 for any size]}}, '
                f"received {spec!r}"
            )
        shapes[name] = tuple(shape)
    return shapes
