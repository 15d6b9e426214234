"""``sonnx run``: an ONNX model on ``.npy`` files, its outputs printed and saved by name.

Inputs are taken as the files hold them: a float64 array (what ``np.random.rand`` makes) fed to
a float32 input is an error naming the cast, unless ``--cast`` asks to cast float files to the
float type each input declares (a note on stderr says so). Outputs are the model's, those of a
``--last-layers`` cut, or the tensors named by ``--output`` (SINGA's ``output=`` cut, several
at once). Each is printed with its values, summarised past NumPy's print threshold, and saved
as ``PREFIX_<output name>.npy`` with the name made safe for a file name.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sonnx import dtypes
from sonnx.errors import BadInputError
from sonnx.onnx.values import OptionalValue, TensorSequence
from sonnx.runtime.rep import SingaRep
from sonnx.tensor import Tensor, to_numpy

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
#: The first bytes of every ``.npy`` file.
_NPY_MAGIC = b"\x93NUMPY"


def load_inputs(rep: SingaRep, paths: Sequence[str], cast: bool) -> list[np.ndarray]:
    """One array per ``.npy`` file, in input order; with ``cast``, float files are cast to
    the float type their input declares, else such a mismatch is refused here with the cast
    to make."""
    arrays = [read_npy(p) for p in paths]
    for i, (spec, path) in enumerate(zip(rep.input_specs, paths, strict=False)):
        array = arrays[i]
        if spec.kind != "tensor_type" or not dtypes.is_float(spec.dtype):
            continue
        target = dtypes.torch_to_numpy(spec.dtype)
        if array.dtype == target or array.dtype.kind != "f":
            continue
        if not cast:
            raise BadInputError(
                f"run: {path}: input {spec.name!r} expects {spec.describe()}, received "
                f"{array.dtype}; pass --cast to cast it, or save it with "
                f"x.astype({'np' if hasattr(np, target.name) else 'ml_dtypes'}.{target.name})"
            )
        print(
            f"sonnx: note: {path}: cast {array.dtype} to {target.name} for input {spec.name!r}",
            file=sys.stderr,
        )
        arrays[i] = array.astype(target)
    return arrays


def read_npy(path: str) -> np.ndarray:
    """The array in the ``.npy`` file ``path``.

    :param path: a file ``np.save`` wrote.
    :returns: the array.
    :raises BadInputError: the file is missing, a directory, not in NumPy's ``.npy`` format
        (an ``.npz``, a text file, a pickle) or cut short.
    """
    file = Path(path)
    if not file.exists():
        raise BadInputError(f"run: input file {path} not found")
    if file.is_dir():
        raise BadInputError(f"run: input {path} is a directory, expected a .npy file")
    with open(file, "rb") as f:
        magic = f.read(len(_NPY_MAGIC))
    if magic != _NPY_MAGIC:
        found = "an .npz archive" if magic.startswith(b"PK") else f"a file starting {magic!r}"
        raise BadInputError(
            f"run: {path} is not a .npy file (NumPy's format, written by np.save), received {found}"
        )
    try:
        return np.load(file, allow_pickle=False)
    except (ValueError, EOFError, OSError) as e:
        raise BadInputError(f"run: {path} cannot be read as a .npy file: {e}") from None


def run_outputs(
    rep: SingaRep, arrays: list[np.ndarray], names: Sequence[str], last_layers: int
) -> dict[str, Any]:
    """The outputs by name, as arrays (see :func:`host_value`): the tensors ``names`` (one
    run, stopped after the last of them to be computed), else those of
    ``rep.run(last_layers=...)``."""
    if not names:
        results = rep.run(arrays, last_layers=last_layers)
        if last_layers == -1:
            names = rep.outputs
        else:
            names = [o for o in rep.steps[len(rep.steps) + last_layers].outputs if o]
        return {n: host_value(v) for n, v in zip(names, results, strict=True)}
    names = list(dict.fromkeys(names))
    produced = rep.program.index.producer
    unknown = [n for n in names if n not in produced and n not in rep.constants]
    if unknown:
        raise BadInputError(
            f"run: no node of the model produces {unknown}; `sonnx info MODEL` lists each "
            "node's output tensors"
        )
    last = max(names, key=lambda n: produced.get(n, -1))
    others = [n for n in names if n != last]
    results = rep.run(arrays, output=last, aux_output=others)
    values = dict(zip([last, *others], results, strict=True))
    return {n: host_value(values[n]) for n in names}


def host_value(value: Any) -> Any:
    """A run's value as NumPy: a tensor's array, a sequence's list of arrays, an optional's
    content (None when empty); maps (ZipMap's) are plain dicts already."""
    if isinstance(value, Tensor):
        return to_numpy(value)
    if isinstance(value, TensorSequence):
        return [to_numpy(t) for t in value]
    if isinstance(value, OptionalValue):
        return None if value.value is None else host_value(value.value)
    return value


def print_outputs(outputs: dict[str, Any], threshold: int) -> None:
    """Each output's name, type, shape and values; an output of more than ``threshold``
    values is summarised (NumPy's ``...``)."""
    with np.printoptions(threshold=threshold):
        for name, value in outputs.items():
            if isinstance(value, np.ndarray):
                print(f"{name}: {value.dtype} {value.shape}")
            else:
                print(f"{name}: {type(value).__name__}")
            print(value)


def output_paths(prefix: str, names: Sequence[str]) -> list[Path]:
    """``PREFIX_<name>.npy`` per output name, each run of characters other than letters,
    digits, ``_``, ``.`` and ``-`` replaced by ``_`` (``resnet/conv:0`` ->
    ``PREFIX_resnet_conv_0.npy``); names that become alike get their position appended."""
    safe = [_UNSAFE.sub("_", name) for name in names]
    return [
        Path(f"{prefix}_{s}_{i}.npy" if safe.count(s) > 1 else f"{prefix}_{s}.npy")
        for i, s in enumerate(safe)
    ]


def save_outputs(outputs: dict[str, Any], prefix: str) -> None:
    """Each array output as ``PREFIX_<name>.npy``; an output that is no array (a sequence, a
    map) is not saved, and a note says so."""
    paths = output_paths(prefix, list(outputs))
    for path, (name, value) in zip(paths, outputs.items(), strict=True):
        if isinstance(value, np.ndarray):
            np.save(path, value)
            print(f"wrote {path}")
        else:
            print(f"sonnx: note: {name} is a {type(value).__name__}, not saved", file=sys.stderr)
