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

import numpy as np

from sonnx import dtypes
from sonnx.errors import BadInputError
from sonnx.onnx.importer import SingaRep
from sonnx.tensor import to_numpy

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def load_inputs(rep: SingaRep, paths: Sequence[str], cast: bool) -> list[np.ndarray]:
    """One array per ``.npy`` file, in input order; with ``cast``, float files are cast to
    the float type their input declares, else such a mismatch is refused here with the cast
    to make."""
    arrays = [np.load(p, allow_pickle=False) for p in paths]
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


def run_outputs(
    rep: SingaRep, arrays: list[np.ndarray], names: Sequence[str], last_layers: int
) -> dict[str, np.ndarray]:
    """The outputs by name: the tensors ``names`` (one run, stopped after the last of them
    to be computed), else those of ``rep.run(last_layers=...)``."""
    if not names:
        return {t.name: to_numpy(t) for t in rep.run(arrays, last_layers=last_layers)}
    names = list(dict.fromkeys(names))
    produced = {o: i for i, step in enumerate(rep.steps) for o in step.outputs if o}
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
    return {n: to_numpy(values[n]) for n in names}


def print_outputs(outputs: dict[str, np.ndarray], threshold: int) -> None:
    """Each output's name, type, shape and values; an output of more than ``threshold``
    values is summarised (NumPy's ``...``)."""
    with np.printoptions(threshold=threshold):
        for name, array in outputs.items():
            print(f"{name}: {array.dtype} {array.shape}")
            print(array)


def output_paths(prefix: str, names: Sequence[str]) -> list[Path]:
    """``PREFIX_<name>.npy`` per output name, each run of characters other than letters,
    digits, ``_``, ``.`` and ``-`` replaced by ``_`` (``resnet/conv:0`` ->
    ``PREFIX_resnet_conv_0.npy``); names that become alike get their position appended."""
    safe = [_UNSAFE.sub("_", name) for name in names]
    return [
        Path(f"{prefix}_{s}_{i}.npy" if safe.count(s) > 1 else f"{prefix}_{s}.npy")
        for i, s in enumerate(safe)
    ]


def save_outputs(outputs: dict[str, np.ndarray], prefix: str) -> None:
    for path, array in zip(output_paths(prefix, list(outputs)), outputs.values(), strict=True):
        np.save(path, array)
        print(f"wrote {path}")
