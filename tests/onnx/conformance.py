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
from sonnx.tensor import Tensor, to_numpy


@cache
def all_cases() -> dict[str, TestCase]:
    """Every official node case by name (building them warns about deliberate overflows)."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return {c.name: c for c in collect_testcases(None)}


def _as_array(value: object) -> np.ndarray:
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, np.ndarray):
        return value
    raise TypeError(f"non-tensor value of type {type(value).__name__} (sequence or optional)")


def _comparable(a: np.ndarray) -> np.ndarray:
    """ml_dtypes arrays (bfloat16, float8) compare as float32; others as they are."""
    if a.dtype.type.__module__ != "numpy":
        return a.astype(np.float32)
    return a


def check_outputs(case: TestCase, expected: list, actual: list[Tensor]) -> str | None:
    """None when every output matches (dtype, shape, values within the case's tolerance)."""
    if len(actual) < len(expected):
        return f"produced {len(actual)} outputs, expected {len(expected)}"
    for k, (ref, out) in enumerate(zip(expected, actual, strict=False)):
        ref = _as_array(ref)
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


def run_case(case: TestCase) -> str | None:
    """None when sonnx passes the case, else a one-line reason."""
    try:
        rep = sonnx.prepare(case.model)
        names = rep.inputs
        for inputs, expected in case.data_sets:
            feeds = {name: _as_array(v) for name, v in zip(names, inputs, strict=False)}
            outputs = rep.run(feeds)
            problem = check_outputs(case, expected, outputs)
            if problem:
                return problem
    except SonnxError as e:
        return f"{type(e).__name__}: {str(e).splitlines()[-1].strip()}"
    except Exception as e:  # any crash is a failed case, reported with its type
        return f"crash {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
    return None
