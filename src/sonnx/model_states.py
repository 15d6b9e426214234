"""The file :meth:`sonnx.model.Model.save_states` writes and ``load_states`` reads.

States are saved as a zip holding ``tensors.npz`` and ``manifest.json`` (format name and
version, and per tensor its name, kind, dtype and shape); nothing is pickled, dtypes NumPy
lacks (bfloat16, float8) are stored as their raw bits, and the file is written to a temporary
name and renamed into place so a crash never leaves half a checkpoint.
"""

from __future__ import annotations

import io
import json
import os
import tempfile
import zipfile
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from sonnx.dtypes import dtype_name
from sonnx.errors import BadInputError
from sonnx.tensor import Tensor

FORMAT_NAME = "sonnx-states"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
TENSORS = "tensors.npz"
MODEL_STATE = "model"
AUX_STATE = "aux"
# torch dtypes NumPy cannot hold, stored as same-width integers holding the raw bits.
_BIT_STORAGE = {
    torch.bfloat16: torch.int16,
    torch.float8_e4m3fn: torch.uint8,
    torch.float8_e4m3fnuz: torch.uint8,
    torch.float8_e5m2: torch.uint8,
    torch.float8_e5m2fnuz: torch.uint8,
}


def write_states(
    path: str, states: Mapping[str, torch.Tensor], aux_states: Mapping[str, Any] | None
) -> None:
    """Write a model's ``states`` and the caller's ``aux_states`` to ``path`` atomically.

    :param path: the file to write.
    :param states: the model's state tensors by name.
    :param aux_states: further values by name (Tensors, torch tensors, arrays or numbers).
    :raises BadInputError: an aux state that cannot be stored as a tensor.
    :raises OSError: the file cannot be written.
    """
    entries = [(MODEL_STATE, n, data) for n, data in states.items()]
    for name, value in (aux_states or {}).items():
        entries.append((AUX_STATE, str(name), _aux_torch(name, value)))
    manifest: dict[str, Any] = {"format": FORMAT_NAME, "version": FORMAT_VERSION}
    records, arrays = [], {}
    for i, (kind, name, data) in enumerate(entries):
        key = f"t{i}"
        array, storage = _to_array(data)
        arrays[key] = array
        records.append(
            {
                "name": name,
                "kind": kind,
                "key": key,
                "dtype": str(data.dtype).removeprefix("torch."),
                "storage": storage,
                "shape": list(data.shape),
            }
        )
    manifest["tensors"] = records
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    _write_atomically(path, json.dumps(manifest, indent=1), buffer.getvalue())


def _aux_torch(name: Any, value: Any) -> torch.Tensor:
    if isinstance(value, Tensor):
        return value.data.detach()
    if isinstance(value, torch.Tensor):
        return value.detach()
    if isinstance(value, (np.ndarray, np.generic, int, float, bool)):
        array = np.asarray(value)
        if array.dtype.kind in "biufc":
            return torch.from_numpy(array)  # host: only written to the states file
    raise BadInputError(
        f"save_states: aux state {name!r} must be a Tensor, a numeric array or a number, "
        f"received {type(value).__name__}"
    )


def _to_array(data: torch.Tensor) -> tuple[np.ndarray, str]:
    """A NumPy array holding ``data`` exactly, and the NumPy dtype name it is stored as."""
    t = data.detach().cpu().contiguous()
    storage = _BIT_STORAGE.get(t.dtype)
    if storage is not None:
        t = t.view(storage)
    array = t.numpy()
    return array, array.dtype.name


def _write_atomically(path: str, manifest: str, tensors: bytes) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".states-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            with zipfile.ZipFile(f, "w", compression=zipfile.ZIP_STORED) as zf:
                zf.writestr(MANIFEST, manifest)
                zf.writestr(TENSORS, tensors)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def read_states(path: str) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """``(model states, aux states)`` from a states file, checking everything it claims.

    :param path: a file written by :func:`write_states`.
    :returns: the model's states and the aux states, as host torch tensors by name.
    :raises BadInputError: no such file, or not a sonnx states file (names what is wrong).
    """

    def bad(what: str) -> BadInputError:
        return BadInputError(f"load_states: {path} is not a valid sonnx states file: {what}")

    try:
        with zipfile.ZipFile(path) as zf:
            names = set(zf.namelist())
            if names != {MANIFEST, TENSORS}:
                raise bad(f"expected a zip holding {MANIFEST} and {TENSORS}, found {sorted(names)}")
            manifest_bytes, tensor_bytes = zf.read(MANIFEST), zf.read(TENSORS)
    except FileNotFoundError:
        raise BadInputError(f"load_states: no such file: {path}") from None
    except IsADirectoryError:
        raise BadInputError(f"load_states: {path} is a directory, expected a file") from None
    except (zipfile.BadZipFile, EOFError, OSError) as e:
        raise bad(f"not a readable zip archive (truncated or corrupt?): {e}") from None
    try:
        manifest = json.loads(manifest_bytes)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise bad(f"{MANIFEST} is not JSON: {e}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
        raise bad(f"{MANIFEST} does not declare format {FORMAT_NAME!r}")
    version = manifest.get("version")
    if not isinstance(version, int) or not 1 <= version <= FORMAT_VERSION:
        raise bad(
            f"format version {version!r} is not supported (this sonnx reads 1..{FORMAT_VERSION})"
        )
    try:
        with np.load(io.BytesIO(tensor_bytes), allow_pickle=False) as npz:
            arrays = {key: npz[key] for key in npz.files}
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as e:
        raise bad(f"{TENSORS} cannot be read without pickle: {e}") from None
    model: dict[str, torch.Tensor] = {}
    aux: dict[str, torch.Tensor] = {}
    records = manifest.get("tensors")
    if not isinstance(records, list):
        raise bad(f"{MANIFEST} has no list of tensors")
    for record in records:
        name, data = _decode_record(record, arrays, bad)
        target = model if record["kind"] == MODEL_STATE else aux
        if name in target:
            raise bad(f"state {name!r} appears twice")
        target[name] = data
    return model, aux


def _decode_record(
    record: Any, arrays: dict[str, np.ndarray], bad: Any
) -> tuple[str, torch.Tensor]:
    fields = ("name", "kind", "key", "dtype", "storage", "shape")
    if not isinstance(record, dict) or any(f not in record for f in fields):
        raise bad(f"a manifest entry lacks one of {fields}: {record!r}")
    name, key = record["name"], record["key"]
    if record["kind"] not in (MODEL_STATE, AUX_STATE):
        raise bad(f"state {name!r} has unknown kind {record['kind']!r}")
    if key not in arrays:
        raise bad(f"state {name!r} refers to array {key!r}, which {TENSORS} lacks")
    array = arrays[key]
    dtype = getattr(torch, str(record["dtype"]), None)
    if not isinstance(dtype, torch.dtype):
        raise bad(f"state {name!r} has unknown dtype {record['dtype']!r}")
    if array.dtype.name != record["storage"] or list(array.shape) != record["shape"]:
        raise bad(
            f"state {name!r}: the manifest says {record['storage']} {record['shape']}, the "
            f"array is {array.dtype.name} {list(array.shape)}"
        )
    # host: model states are copied into their tensors (on any device); aux states are
    # returned on the host, where the caller can move them with Tensor.to_device
    data = torch.from_numpy(np.ascontiguousarray(array))
    if dtype in _BIT_STORAGE:
        data = data.view(dtype)
    elif data.dtype != dtype:
        raise bad(f"state {name!r}: dtype {dtype_name(dtype)} stored as {array.dtype.name}")
    return str(name), data
