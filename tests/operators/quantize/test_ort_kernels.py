"""onnxruntime's MatMulNBits kernel under sonnx (sonnx.operators.quantize.ort_kernels): equal to
onnxruntime's run of the whole model, bit for bit; graph mode keeps it as one call; gradients
stay torch's; ``kernels="torch"``, a node onnxruntime refuses and no onnxruntime at all take
the torch path."""

from __future__ import annotations

import gc
import sys
import threading
import warnings

import numpy as np
import pytest
import torch
from onnx import helper, numpy_helper

import sonnx
from sonnx import autograd
from sonnx.errors import BadInputError
from sonnx.operators.quantize.contrib_nbits import MatMulNBits
from tests.contrib_quant_helpers import nbits_weight, node_model, ort_run
from tests.helpers import check_grad

RNG = np.random.default_rng(45)
F32 = np.float32
ORT_KERNEL = "onnxruntime's MatMulNBits"
TORCH_KERNEL = "torch's (dequantized float32 weight)"


def nbits_case(bits, block, zero_points, accuracy_level, rows, k=300, n=7, g_idx=False, bias=False):
    """A one-node MatMulNBits model (K not a multiple of the block) and its input."""
    weight = nbits_weight(RNG, bits, block, k, n, zero_points)
    weight["g_idx"] = None
    if g_idx:
        weight["g_idx"] = RNG.permutation(np.arange(k, dtype=np.int32) // block).astype(np.int32)
    if bias:
        weight["bias"] = RNG.standard_normal(n).astype(F32)
    feeds = {"A": RNG.standard_normal((rows, k)).astype(F32)}
    attrs = {"K": k, "N": n, "bits": bits, "block_size": block, "accuracy_level": accuracy_level}
    return node_model("MatMulNBits", {**feeds, **weight}, feeds, **attrs), feeds


def onnx_array(model, name):
    """An initializer of ``model`` as NumPy."""
    (found,) = [t for t in model.graph.initializer if t.name == name]
    return numpy_helper.to_array(found).copy()


def run_rep(rep, feeds):
    """The output as NumPy, and the kernel the node's operator used."""
    (y,) = rep.run(list(feeds.values()))
    return y.numpy(), rep.program.steps[0].op.kernel_used


@pytest.mark.parametrize("rows", [1, 5])
@pytest.mark.parametrize("accuracy_level", [0, 4])
@pytest.mark.parametrize("zero_points", [None, "uint8"])
@pytest.mark.parametrize("block", [32, 128])
@pytest.mark.parametrize("bits", [4, 8])
def test_matmul_nbits_equals_onnxruntime_exactly(bits, block, zero_points, accuracy_level, rows):
    model, feeds = nbits_case(bits, block, zero_points, accuracy_level, rows)
    (expected,) = ort_run(model, feeds)
    got, kernel = run_rep(sonnx.prepare(model), feeds)
    assert kernel == ORT_KERNEL
    np.testing.assert_array_equal(got, expected)


def test_matmul_nbits_with_g_idx_and_float_zero_points_equals_onnxruntime_exactly():
    model, feeds = nbits_case(4, 32, "float", 4, 3, k=256, g_idx=True)
    (expected,) = ort_run(model, feeds)
    got, kernel = run_rep(sonnx.prepare(model), feeds)
    assert kernel == ORT_KERNEL
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("accuracy_level", [0, 4])
def test_a_bias_is_added_inside_the_kernel_as_onnxruntime_adds_it(accuracy_level):
    """onnxruntime's kernel adds the bias inside its accumulation: at accuracy level 4 that
    differs in the last bit from adding it after the product, so the bias is a slot of the
    node's session."""
    model, feeds = nbits_case(4, 32, "uint8", accuracy_level, 5, k=256, n=64, bias=True)
    (expected,) = ort_run(model, feeds)
    got, kernel = run_rep(sonnx.prepare(model), feeds)
    assert kernel == ORT_KERNEL
    np.testing.assert_array_equal(got, expected)


def test_kernels_torch_runs_the_torch_path_and_explain_names_each_kernel():
    model, feeds = nbits_case(4, 32, "uint8", 4, 2)
    (expected,) = ort_run(model, feeds)
    bridged, plain = sonnx.prepare(model), sonnx.prepare(model, kernels="torch")
    got, kernel = run_rep(plain, feeds)
    assert kernel == TORCH_KERNEL
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    run_rep(bridged, feeds)
    assert f"{ORT_KERNEL} kernel: steps 0 (MatMulNBits)" in bridged.explain(feeds)
    assert f"{TORCH_KERNEL} kernel: steps 0 (MatMulNBits)" in plain.explain(feeds)


def test_prepare_refuses_an_unknown_kernels_choice():
    model, _ = nbits_case(4, 32, None, 0, 1)
    with pytest.raises(BadInputError, match=r"kernels must be one of .* received 'ort'"):
        sonnx.prepare(model, kernels="ort")


def test_without_onnxruntime_the_torch_path_runs(monkeypatch):
    model, feeds = nbits_case(4, 32, None, 4, 3)
    (expected,) = ort_run(model, feeds)
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # `import onnxruntime` now fails
    got, kernel = run_rep(sonnx.prepare(model), feeds)
    assert kernel == TORCH_KERNEL
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_a_node_onnxruntime_refuses_warns_once_naming_it_and_runs_on_torch():
    # onnxruntime's CPU kernel refuses 8-bit weights with float zero points; torch computes it.
    model, feeds = nbits_case(8, 32, "float", 0, 2)
    rep, plain = sonnx.prepare(model), sonnx.prepare(model, kernels="torch")
    name = rep.program.steps[0].info.name
    with pytest.warns(RuntimeWarning, match=f"MatMulNBits node '{name}'.*the torch path runs"):
        got, kernel = run_rep(rep, feeds)
    assert kernel == TORCH_KERNEL
    np.testing.assert_array_equal(got, run_rep(plain, feeds)[0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run_rep(rep, feeds)  # no second warning: the node stays on torch


def test_gradients_stay_torchs_and_equal_finite_differences():
    k, n, block = 64, 3, 32
    model, _ = nbits_case(4, block, "uint8", 4, 2, k=k, n=n)
    weights = [torch.from_numpy(onnx_array(model, name)) for name in ("B", "scales")]
    zero_points = torch.from_numpy(onnx_array(model, "zero_points"))
    op = MatMulNBits(K=k, N=n, bits=4, block_size=block, accuracy_level=0)
    arrays = [RNG.standard_normal((2, k)), *weights, zero_points]
    check_grad(lambda *xs: op(*xs), arrays, wrt=[0])
    assert op.kernel_used == TORCH_KERNEL


def test_an_imported_model_trains_through_the_product():
    """A float weight before the 4-bit product gets its gradient (QLoRA's shape of model)."""
    k, n = 64, 3
    nbits, _ = nbits_case(4, 32, None, 4, 2, k=k, n=n)
    graph = nbits.graph
    graph.node[0].input[0] = "A0"
    graph.input[0].name = "X"
    graph.node.insert(0, helper.make_node("MatMul", ["X", "W"], ["A0"]))
    graph.initializer.append(numpy_helper.from_array(RNG.standard_normal((k, k)).astype(F32), "W"))
    rep = sonnx.prepare(nbits)
    autograd.training = True
    try:
        (y,) = rep.run([RNG.standard_normal((2, k)).astype(F32)])
        grads = {p.name: g for p, g in autograd.backward(y)}
    finally:
        autograd.training = False
    assert rep.program.steps[1].op.kernel_used == TORCH_KERNEL
    assert set(grads) == {"W"} and np.isfinite(grads["W"].numpy()).all()
    assert np.abs(grads["W"].numpy()).max() > 0


def test_threads_share_one_prepared_model():
    model, feeds = nbits_case(4, 32, "uint8", 4, 4, k=256, n=16)
    (expected,) = ort_run(model, feeds)
    rep = sonnx.prepare(model)
    results: list[np.ndarray] = []

    def work() -> None:
        for _ in range(5):
            results.append(run_rep(rep, feeds)[0])

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 40
    for got in results:
        np.testing.assert_array_equal(got, expected)


def test_graph_mode_compiles_the_kernel_call_once_for_every_length(tmp_path, monkeypatch):
    monkeypatch.setenv("SONNX_CACHE_DIR", str(tmp_path))
    model, _ = nbits_case(4, 32, "uint8", 4, 1, k=128, n=8)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "rows"
    rep = sonnx.prepare(model, use_graph=True)
    for rows in (1, 3, 6):
        feeds = {"A": RNG.standard_normal((rows, 128)).astype(F32)}
        (expected,) = ort_run(model, feeds)
        np.testing.assert_array_equal(rep.run([feeds["A"]])[0].numpy(), expected)
    parts = rep.graph_runner.parts()
    assert [p.compiled for p in parts] == [True]
    assert len(list((tmp_path / "graphs").glob("*/*/graph.json"))) == 1
    assert f"{ORT_KERNEL} kernel" in rep.explain([feeds["A"]])


def test_graph_mode_stores_torchs_kernels_apart_from_onnxruntimes():
    """The traced graphs differ, so a store entry of one must not serve the other."""
    model, _ = nbits_case(4, 32, None, 4, 1)
    default = sonnx.prepare(model, use_graph=True).graph_runner.identity
    plain = sonnx.prepare(model, use_graph=True, kernels="torch").graph_runner.identity
    assert default and plain and default != plain


def test_a_freed_models_session_never_serves_the_next_model_at_its_addresses():
    """Models of one shape prepared one after another: the allocator may give the next
    model's weights the freed one's addresses (version 0 again); each runs its own weights."""
    for _ in range(4):
        model, feeds = nbits_case(4, 32, "uint8", 4, 1, k=128, n=8)
        (expected,) = ort_run(model, feeds)
        rep = sonnx.prepare(model)
        np.testing.assert_array_equal(run_rep(rep, feeds)[0], expected)
        del rep
        gc.collect()


def test_tensors_aliasing_one_weight_share_its_session(monkeypatch):
    """Each compiled graph of a model (a prompt's, a decode step's) hands the kernel its own
    tensor over the model's weight memory: they share one session (before, the two took
    turns evicting each other's, 82 builds per generate call); a weight changed in place, or
    freed, does not."""
    from sonnx.operators.quantize import ort_kernels, ort_sessions

    built = []

    class Counted(ort_sessions.SessionKernel):
        def __init__(self, *args):
            built.append(1)
            super().__init__(*args)

    monkeypatch.setattr(ort_sessions, "SessionKernel", Counted)
    model, feeds = nbits_case(4, 32, "uint8", 4, 2, k=256, n=64)
    (expected,) = ort_run(model, feeds)
    spec = ort_kernels.nbits_spec([256, 64, 4, 32, 4])
    weights = [torch.from_numpy(onnx_array(model, n)) for n in ("B", "scales", "zero_points")]
    a = torch.from_numpy(feeds["A"])

    def product(b):
        y = torch.empty(2, 64)
        ort_sessions.kernel_for(spec, [a, b, *weights[1:], None, None])([a], y)
        return y.numpy()

    # Two tensors over one memory, each with its own version counter, as from_blob makes them.
    aliases = [weights[0], torch.from_numpy(weights[0].numpy())]
    for b in aliases * 3:
        np.testing.assert_array_equal(product(b), expected)
    assert len(built) == 1
    with torch.no_grad():
        aliases[0][0, 0, 0] ^= 0xFF  # in place: its version moves on
    changed = product(aliases[0])
    assert len(built) == 2 and not np.array_equal(changed, expected)
    np.testing.assert_array_equal(product(aliases[1]), changed)  # the new session's values
    assert len(built) == 2


def test_sessions_found_by_value_alone_are_bounded(monkeypatch):
    """Sessions whose constants are all small are found by value and watch no tensor: only
    the newest are kept, and one dropped is built again when its values come back."""
    from sonnx.operators.quantize import ort_kernels, ort_sessions

    monkeypatch.setattr(ort_sessions, "_BY_VALUE_ENTRIES", 3)
    monkeypatch.setattr(ort_sessions, "_BY_VALUE_KEYS", {})
    spec = ort_kernels.nbits_spec([32, 4, 4, 32, 0])
    a = torch.from_numpy(RNG.standard_normal((1, 32)).astype(F32))
    b = torch.from_numpy(RNG.integers(0, 256, (4, 1, 16)).astype(np.uint8))

    def product(scale):
        scales = torch.full((4,), scale)
        y = torch.empty(1, 4)
        ort_sessions.kernel_for(spec, [a, b, scales, None, None, None])([a], y)
        return y

    first = product(0.5)
    for scale in (0.1, 0.2, 0.3, 0.4):
        torch.testing.assert_close(product(scale), first * (scale / 0.5), rtol=1e-5, atol=1e-6)
    assert len(ort_sessions._BY_VALUE_KEYS) == 3
    assert sum(key[0] == () and key[4] is spec for key in ort_sessions._SESSIONS) == 3
    torch.testing.assert_close(product(0.5), first)  # dropped, built again
