"""A session's IO binding is kept per thread and a name is bound again only where its memory
changed (sonnx.operators.quantize.ort_sessions): every call still reads the values its input
holds now and writes the output it was handed."""

from __future__ import annotations

import threading

import numpy as np
import torch

from sonnx.operators.quantize.ort_kernels import nbits_spec
from sonnx.operators.quantize.ort_sessions import kernel_for
from tests.contrib_quant_helpers import ort_run
from tests.operators.quantize.test_ort_kernels import nbits_case, onnx_array

RNG = np.random.default_rng(4546)
K, N = 64, 5


def expected(model, a):
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "rows"
    (y,) = ort_run(model, {"A": a.numpy()})
    return y


def test_the_same_memory_with_new_values_and_new_memory_both_run_right():
    model, feeds = nbits_case(4, 32, "uint8", 4, 1, k=K, n=N)
    weights = [torch.from_numpy(onnx_array(model, n)) for n in ("B", "scales", "zero_points")]
    a = torch.from_numpy(feeds["A"].copy())
    kernel = kernel_for(nbits_spec([K, N, 4, 32, 4]), [a, *weights, None, None])
    y = torch.empty(1, N)
    kernel([a], y)
    np.testing.assert_array_equal(y.numpy(), expected(model, a))
    a.copy_(torch.randn(1, K))  # same address, shape and dtype: not bound again
    kernel([a], y)
    np.testing.assert_array_equal(y.numpy(), expected(model, a))
    other = torch.full((1, N), 7.0)  # a new output buffer
    kernel([a], other)
    np.testing.assert_array_equal(other.numpy(), y.numpy())
    rows = torch.randn(3, K)  # another address and shape
    wide = torch.empty(3, N)
    kernel([rows], wide)
    np.testing.assert_array_equal(wide.numpy(), expected(model, rows))


def test_threads_each_bind_their_own_memory():
    model, _ = nbits_case(4, 32, None, 0, 1, k=K, n=N)
    weights = [torch.from_numpy(onnx_array(model, n)) for n in ("B", "scales")]
    kernel = kernel_for(
        nbits_spec([K, N, 4, 32, 0]), [torch.zeros(1, K), *weights, None, None, None]
    )
    inputs = [torch.randn(2, K) for _ in range(6)]
    results: dict[int, list[np.ndarray]] = {}

    def work(i: int) -> None:
        y = torch.empty(2, N)
        found = results.setdefault(i, [])
        for _ in range(20):
            kernel([inputs[i]], y)
            found.append(y.numpy().copy())

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, found in results.items():
        want = expected(model, inputs[i])
        assert len(found) == 20
        for got in found:
            np.testing.assert_array_equal(got, want)
