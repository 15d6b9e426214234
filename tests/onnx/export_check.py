"""One helper for the export tests: build → export → check → run in onnxruntime → compare.

``export_check(build, make_inputs)`` runs ``build`` eagerly in sonnx on the inputs of batch
size 2, exports that recorded graph with a dynamic batch axis, validates it with the full ONNX
checker (strict shape inference included), then feeds onnxruntime the inputs of batch 2 *and*
batch 5 and compares each result with sonnx's own eager result at that batch size.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx.reference import ReferenceEvaluator

from sonnx.onnx.exporter import to_onnx
from sonnx.tensor import Tensor, to_numpy

Build = Callable[..., Any]
MakeInputs = Callable[[int], Sequence[np.ndarray]]


def as_outputs(result: Any) -> list[Tensor]:
    """A builder's result (one tensor or a tuple/list of them) as a list of tensors."""
    if isinstance(result, Tensor):
        return [result]
    return [t for t in result if t is not None]


def run_eager(build: Build, arrays: Sequence[np.ndarray]) -> tuple[list[Tensor], list[Tensor]]:
    """The input tensors (named x0, x1, …) and the outputs ``build`` computes from them."""
    inputs = [
        Tensor(data=np.ascontiguousarray(a), requires_grad=False, name=f"x{i}")
        for i, a in enumerate(arrays)
    ]
    return inputs, as_outputs(build(*inputs))


def ort_session(model: onnx.ModelProto) -> ort.InferenceSession:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def assert_same(expected: np.ndarray, got: np.ndarray, rtol: float, atol: float, what: str) -> None:
    """Same dtype, same shape and values within ``rtol`` (exact for non-float types)."""
    assert got.dtype == expected.dtype, f"{what}: dtype {got.dtype} != {expected.dtype}"
    assert got.shape == expected.shape, f"{what}: shape {got.shape} != {expected.shape}"
    if np.issubdtype(expected.dtype, np.floating):
        np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol, err_msg=what)
    else:
        np.testing.assert_array_equal(got, expected, err_msg=what)


def export_check(
    build: Build,
    make_inputs: MakeInputs,
    *,
    batches: Sequence[int] = (2, 5),
    opset: int | None = None,
    dynamic_batch: bool = True,
    rtol: float = 1e-5,
    atol: float = 1e-6,
    runtime: str = "onnxruntime",
    values: bool = True,
    check_dtype: bool = True,
) -> onnx.ModelProto:
    """Export ``build`` traced at ``batches[0]`` and check it at every batch size in ``batches``.

    ``make_inputs(batch)`` returns the NumPy inputs for one batch size (it must be
    deterministic). ``runtime="reference"`` runs onnx's ReferenceEvaluator instead of
    onnxruntime, for the few valid ONNX ops onnxruntime has no kernel for. Returns the model.
    """
    inputs, outputs = run_eager(build, make_inputs(batches[0]))
    model = to_onnx(inputs, outputs, opset=opset, dynamic_batch=dynamic_batch)
    onnx.checker.check_model(model, full_check=True)
    run = ReferenceEvaluator(model).run if runtime == "reference" else ort_session(model).run
    names = [i.name for i in model.graph.input]
    for batch in batches:
        arrays = make_inputs(batch)
        _, expected = run_eager(build, arrays)
        got = [np.asarray(g) for g in run(None, dict(zip(names, arrays, strict=True)))]
        assert len(got) == len(expected)
        for k, (e, g) in enumerate(zip(expected, got, strict=True)):
            want = to_numpy(e)
            g = g if check_dtype else g.astype(want.dtype)
            if values:
                assert_same(want, g, rtol, atol, f"output {k} at batch {batch}")
            else:
                assert (g.dtype, g.shape) == (want.dtype, want.shape), f"output {k}"
    return model


def rng_inputs(*specs: tuple[Sequence[int], Any], seed: int = 0, low: float = -1.0) -> MakeInputs:
    """``make_inputs`` for arrays of shapes ``(batch, *rest)``: floats uniform in [low, 1),
    integers in [0, 3), booleans random; a spec's dtype may also be a callable
    ``(rng, shape) -> array`` for custom data."""

    def make(batch: int) -> list[np.ndarray]:
        rng = np.random.default_rng(seed + batch)
        arrays = []
        for rest, dtype in specs:
            shape = (batch, *rest)
            if callable(dtype) and not isinstance(dtype, type):
                arrays.append(dtype(rng, shape))
            elif np.issubdtype(dtype, np.floating):
                arrays.append(rng.uniform(low, 1.0, shape).astype(dtype))
            elif dtype is np.bool_:
                arrays.append(rng.random(shape) < 0.5)
            else:
                arrays.append(rng.integers(0, 3, shape).astype(dtype))
        return arrays

    return make


def param(array: np.ndarray, name: str | None = None) -> Tensor:
    """A parameter tensor (exported as an initializer)."""
    return Tensor(data=np.asarray(array), requires_grad=True, stores_grad=True, name=name)


def const(array: Any) -> Tensor:
    """A constant tensor (exported as an initializer, never a graph input)."""
    return Tensor(data=np.asarray(array), requires_grad=False)
