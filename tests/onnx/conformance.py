"""Running the official ONNX node test cases through sonnx.

``onnx.backend.test.case.node.collect_testcases()`` builds every case in memory (1884 in onnx
1.23.2): a one-node (or expanded) model, input arrays and expected outputs with a tolerance.
"""

from __future__ import annotations

import warnings
from functools import cache

import numpy as np
import onnx
from onnx import numpy_helper
from onnx.backend.test.case.node import collect_testcases
from onnx.backend.test.case.test_case import TestCase

import sonnx
from sonnx.errors import SonnxError
from sonnx.onnx.values import OptionalValue
from sonnx.tensor import Tensor, to_numpy


@cache
def all_cases() -> dict[str, TestCase]:
    """Every official node case by name (building them warns about deliberate overflows).

    Many cases draw their inputs from NumPy's global generator while being built; it is seeded
    here so that every run checks the same inputs.
    """
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        np.random.seed(0)
        return {c.name: c for c in collect_testcases(None)}


def _as_value(value: object) -> object:
    """A case's input/output as arrays: tensors, lists of them (sequences) or None."""
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, (np.ndarray, np.generic)):
        return np.asarray(value)
    if isinstance(value, list):
        return [_as_value(v) for v in value]
    if value is None:
        return None
    raise TypeError(f"unsupported test value of type {type(value).__name__}")


def _comparable(a: np.ndarray) -> np.ndarray:
    """ml_dtypes arrays (bfloat16, float8) compare as float32; others as they are."""
    if a.dtype.type.__module__ != "numpy":
        return a.astype(np.float32)
    return a


def _compare_tensor(case: TestCase, k: str, ref: np.ndarray, out: object) -> str | None:
    if not isinstance(out, Tensor):
        return f"output {k}: expected a tensor, received {type(out).__name__}"
    got = to_numpy(out)
    if ref.dtype != got.dtype:
        return f"output {k}: dtype {got.dtype}, expected {ref.dtype}"
    if ref.shape != got.shape:
        return f"output {k}: shape {got.shape}, expected {ref.shape}"
    ref_c, got_c = _comparable(ref), _comparable(got)
    if ref_c.dtype.kind in "fc":
        close = np.isclose(got_c, ref_c, rtol=case.rtol, atol=case.atol, equal_nan=True)
        if not close.all():
            worst = np.max(np.abs(got_c.astype(np.float64) - ref_c.astype(np.float64)))
            return f"output {k}: {int((~close).sum())} values differ (max abs diff {worst:.3g})"
    elif not np.array_equal(got_c, ref_c):
        return f"output {k}: {int((got_c != ref_c).sum())} values differ"
    return None


def _compare_value(case: TestCase, k: str, ref: object, out: object) -> str | None:
    if isinstance(out, OptionalValue):
        out = out.value
    if ref is None:
        return None if out is None else f"output {k}: expected an empty optional"
    if isinstance(ref, list):
        if not isinstance(out, list) or len(out) != len(ref):
            return f"output {k}: expected a sequence of {len(ref)} tensors"
        for i, (r, o) in enumerate(zip(ref, out, strict=True)):
            problem = _compare_value(case, f"{k}[{i}]", r, o)
            if problem:
                return problem
        return None
    return _compare_tensor(case, k, ref, out)


def check_outputs(case: TestCase, expected: list, actual: list) -> str | None:
    """None when every output matches (dtype, shape, values within the case's tolerance)."""
    if len(actual) < len(expected):
        return f"produced {len(actual)} outputs, expected {len(expected)}"
    for k, (ref, out) in enumerate(zip(expected, actual, strict=False)):
        problem = _compare_value(case, str(k), _as_value(ref), out)
        if problem:
            return problem
    return None


def run_case(case: TestCase) -> str | None:
    """None when sonnx passes the case, else a one-line reason."""
    try:
        rep = sonnx.prepare(case.model)
        names = rep.inputs
        for inputs, expected in case.data_sets:
            feeds = {name: _as_value(v) for name, v in zip(names, inputs, strict=False)}
            # The first run of an input signature goes through the step loop, the second
            # through the plan built from it (see sonnx.runtime.plan): both must pass.
            for run in ("first", "second"):
                problem = check_outputs(case, expected, rep.run(feeds))
                if problem:
                    return f"{run} run: {problem}"
            if not rep.program.runner.runs_plans:
                return "the plan failed where the step loop did not"
    except SonnxError as e:
        return f"{type(e).__name__}: {str(e).splitlines()[-1].strip()}"
    except Exception as e:  # any crash is a failed case, reported with its type
        return f"crash {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
    return None
