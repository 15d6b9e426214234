"""A loaded graph reads the model's own weights: its library holds no copy of them.

The tests of the plain products graph load it from a store compiled once for the module."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

import sonnx
from sonnx.runtime.compiled_graphs import load_library
from sonnx.runtime.library_constants import SOURCES_FILE, LibraryWeights, StaleLibraryError
from sonnx.runtime.store import store_root
from sonnx.tensor import to_numpy
from tests.runtime.graph_mode_models import compile_into_store, copy_store


def _products(gemm: bool = False, doubled: bool = False) -> onnx.ModelProto:
    """x @ w1 (a MatMul by a weight, or a Gemm by its transpose) + bias, relu, @ w2 (or
    @ (w2 * 2), a weight the compile computes)."""
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((64, 48)).astype(np.float32)
    w2 = numpy_helper.from_array(rng.standard_normal((48, 16)).astype(np.float32), "w2")
    bias = numpy_helper.from_array(rng.standard_normal(48).astype(np.float32), "bias")
    two = numpy_helper.from_array(np.array(2.0, np.float32), "two")
    first = (
        helper.make_node("Gemm", ["x", "w1", "bias"], ["b"], transB=1)
        if gemm
        else helper.make_node("Add", ["h", "bias"], ["b"])
    )
    nodes = [
        *([] if gemm else [helper.make_node("MatMul", ["x", "w1"], ["h"])]),
        first,
        helper.make_node("Relu", ["b"], ["r"]),
        *([helper.make_node("Mul", ["w2", "two"], ["w2x2"])] if doubled else []),
        helper.make_node("MatMul", ["r", "w2x2" if doubled else "w2"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "products",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 16])],
        [numpy_helper.from_array(w1.T.copy() if gemm else w1, "w1"), w2, bias, two],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _library() -> Path:
    root = store_root()
    assert root is not None
    (library,) = (root / "graphs").glob("*/*/graph.so")
    return library


def _sources() -> dict[str, tuple[str, str, tuple[int, ...]]]:
    return torch.load(_library().with_name(SOURCES_FILE), weights_only=True)["sources"]


def _prepared(model: onnx.ModelProto, x: np.ndarray) -> tuple[sonnx.SingaRep, np.ndarray]:
    rep = sonnx.prepare(model, use_graph=True)
    got = to_numpy(rep.run([x])[0])
    np.testing.assert_allclose(got, to_numpy(sonnx.prepare(model).run([x])[0]), rtol=1e-5)
    return rep, got


def _x(rows: int = 3) -> np.ndarray:
    return np.random.default_rng(1).standard_normal((rows, 64)).astype(np.float32)


@pytest.fixture(scope="module")
def stored_products(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store holding the graph of ``_products()``, compiled once for the tests reading it."""
    root = tmp_path_factory.mktemp("stored_products")
    assert compile_into_store(root, _products(), [_x()]) == 1
    return root


def test_a_loaded_graph_reads_the_model_weights_and_its_library_holds_none(
    stored_products,
) -> None:
    copy_store(stored_products)
    x = _x()
    rep, expected = _prepared(_products(), x)
    weights = rep.graph_runner.library_weights()
    assert {kind for kind, _, _ in _sources().values()} == {"weight"}
    # 16 KiB of weights would show in the library's size only as much as this allows
    assert _library().stat().st_size < 8 * 2**20
    run = load_library(_library(), torch.device("cpu"), weights)
    model_memory = {t.data_ptr() for t in weights.named.values()}
    assert run.constants and all(t.data_ptr() in model_memory for t in run.constants.values())
    np.testing.assert_array_equal(run(torch.from_numpy(x))[0].numpy(), expected)


def test_a_transposed_weight_is_read_as_the_transpose_of_the_model_weight() -> None:
    x = _x()
    rep, expected = _prepared(_products(gemm=True), x)
    assert ("transposed", "w1", (64, 48)) in _sources().values()
    run = load_library(_library(), torch.device("cpu"), rep.graph_runner.library_weights())
    np.testing.assert_allclose(run(torch.from_numpy(x))[0].numpy(), expected, rtol=1e-6)


def test_a_computed_constant_is_saved_and_shared_with_a_graph_that_reads_it() -> None:
    x = _x()
    rep, expected = _prepared(_products(doubled=True), x)
    assert "saved" in {kind for kind, _, _ in _sources().values()}
    first = load_library(_library(), torch.device("cpu"), rep.graph_runner.library_weights())
    computed = [t for t in first.constants.values() if t.shape == (48, 16)]
    weights = LibraryWeights(rep.graph_runner.library_weights().named, computed)
    second = load_library(_library(), torch.device("cpu"), weights)
    assert any(t is computed[0] for t in second.constants.values())
    np.testing.assert_array_equal(second(torch.from_numpy(x))[0].numpy(), expected)


def test_a_library_loaded_without_the_weights_it_reads_is_refused(stored_products) -> None:
    copy_store(stored_products)
    rep, _ = _prepared(_products(), _x())
    named = dict(rep.graph_runner.library_weights().named)
    with pytest.raises(StaleLibraryError, match=r"'w1'.*the model has none"):
        without = {n: t for n, t in named.items() if n != "w1"}
        load_library(_library(), torch.device("cpu"), LibraryWeights(without))
    named["w1"] = torch.zeros(3, 3)
    with pytest.raises(StaleLibraryError, match=r"'w1' as shape \[64, 48\]; it is \[3, 3\]"):
        load_library(_library(), torch.device("cpu"), LibraryWeights(named))


def test_a_weight_changed_in_place_after_loading_changes_the_results_as_in_eager(
    stored_products,
) -> None:
    copy_store(stored_products)
    model = _products()
    x = np.random.default_rng(2).standard_normal((4, 64)).astype(np.float32)
    graph, eager = sonnx.prepare(model, use_graph=True), sonnx.prepare(model)
    graph.run([x])
    assert graph.graph_runner.loaded_count == 1
    for rep in (graph, eager):
        with torch.no_grad():
            rep.tensor_map["w1"].data.mul_(-0.5)
    np.testing.assert_allclose(
        to_numpy(graph.run([x])[0]), to_numpy(eager.run([x])[0]), rtol=1e-5, atol=1e-5
    )
