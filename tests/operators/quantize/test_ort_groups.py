"""MatMulNBits nodes reading one input, run as one onnxruntime session
(sonnx.runtime.product_groups, sonnx.operators.quantize.ort_groups): each output equal to
onnxruntime's run of the separate nodes, bit for bit, in one ``Run``; the group steps aside for
a gradient, ``kernels="torch"`` and a member onnxruntime refuses; graph mode keeps it as one
call and compiles once for every length."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

import sonnx
from sonnx import autograd
from sonnx.operators.quantize import ort_sessions
from sonnx.runtime.product_groups import GROUPED_KERNEL, PRODUCT_GROUP
from tests.contrib_quant_helpers import nbits_weight, ort_run

RNG = np.random.default_rng(4545)
F32 = np.float32
K = 96
TORCH_KERNEL = "torch's (dequantized float32 weight)"
ORT_KERNEL = "onnxruntime's MatMulNBits"


def nbits_node(name, a, n, zero_points, accuracy_level, initializers, bits=4, block=32, bias=False):
    """A MatMulNBits node ``name`` reading ``a`` (K = 96, not a multiple of 64), its weights
    appended to ``initializers``."""
    arrays = nbits_weight(RNG, bits, block, K, n, zero_points)
    inputs = [a, f"{name}.B", f"{name}.scales", f"{name}.zero_points" if zero_points else ""]
    if bias:
        arrays["bias"] = RNG.standard_normal(n).astype(F32)
        inputs += ["", f"{name}.bias"]
    initializers += [
        numpy_helper.from_array(v, f"{name}.{k}") for k, v in arrays.items() if v is not None
    ]
    attrs = {"K": K, "N": n, "bits": bits, "block_size": block, "accuracy_level": accuracy_level}
    return helper.make_node(
        "MatMulNBits", inputs, [f"{name}.y"], name=name, domain="com.microsoft", **attrs
    )


def group_model(accuracy_level, first_zero_points="uint8", third=None, float_before=False):
    """X -> three MatMulNBits (N = 7, 12, 5; the first with ``first_zero_points``, the second
    with none, the third with a bias) and a fourth on Relu(X), which reads another input; with
    ``float_before``, X is first multiplied by a float weight W (trainable)."""
    initializers = []
    nodes = []
    a = "X"
    if float_before:
        initializers.append(numpy_helper.from_array(RNG.standard_normal((K, K)).astype(F32), "W"))
        nodes.append(helper.make_node("MatMul", ["X", "W"], ["XW"]))
        a = "XW"
    zero_points, bits = third or ("uint8", 4)
    nodes += [
        nbits_node("q", a, 7, first_zero_points, accuracy_level, initializers),
        helper.make_node("Relu", [a], ["r"]),
        nbits_node("k", a, 12, None, accuracy_level, initializers),
        nbits_node("v", a, 5, zero_points, accuracy_level, initializers, bits=bits, bias=True),
        nbits_node("o", "r", 6, None, accuracy_level, initializers),
        helper.make_node("Add", ["q.y", "q.y"], ["twice"]),
    ]
    rows = helper.make_tensor_value_info("X", TensorProto.FLOAT, ["rows", K])
    names = ["q.y", "k.y", "v.y", "o.y", "twice"]
    outputs = [helper.make_empty_tensor_value_info(n) for n in names]
    graph = helper.make_graph(nodes, "group", [rows], outputs, initializers)
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=10)


def assert_onnxruntimes(got, expected):
    """Each output equal to onnxruntime's bit for bit (v's bias added inside the kernel, as
    onnxruntime adds it)."""
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_array_equal(g, e)


def kernels_used(rep):
    return {s.info.name: s.op.kernel_used for s in rep.program.steps if s.info.name in "qkvo"}


@pytest.fixture
def counted_runs(monkeypatch):
    """The onnxruntime runs made through the bridge (each a list of its output names)."""
    runs: list[tuple[str, ...]] = []
    call = ort_sessions.SessionKernel.__call__

    def counting(self, bound, y):
        runs.append(tuple(self._outputs))
        return call(self, bound, y)

    monkeypatch.setattr(ort_sessions.SessionKernel, "__call__", counting)
    return runs


@pytest.mark.parametrize("rows", [1, 5])
@pytest.mark.parametrize("accuracy_level", [0, 4])
@pytest.mark.parametrize("first_zero_points", [None, "uint8"])
def test_grouped_products_equal_onnxruntimes_separate_nodes_exactly(
    first_zero_points, accuracy_level, rows, counted_runs
):
    model = group_model(accuracy_level, first_zero_points)
    rep = sonnx.prepare(model)
    groups = [f for f in rep.program.fusions.values() if f.name == PRODUCT_GROUP]
    assert [f.outputs for f in groups] == [("q.y", "k.y", "v.y")]
    x = RNG.standard_normal((rows, K)).astype(F32)
    expected = ort_run(model, {"X": x})
    for _ in range(2):  # the step loop, then the generated plan
        counted_runs.clear()
        got = [y.numpy() for y in rep.run([x])]
        assert_onnxruntimes(got, expected)
        assert sorted(counted_runs) == [("y",), ("y_0", "y_1", "y_2")]  # o alone, one group
    assert kernels_used(rep) == {"q": GROUPED_KERNEL, "k": GROUPED_KERNEL,
                                 "v": GROUPED_KERNEL, "o": ORT_KERNEL}  # fmt: skip
    assert f"{GROUPED_KERNEL} kernel: steps 0 (MatMulNBits), 2 (MatMulNBits), 3 " in rep.explain(
        [x]
    )


def test_a_group_equals_the_same_nodes_run_one_by_one_at_every_value():
    """all_outputs runs each node alone (no group): the same bits as the group's run, the
    bias included."""
    for accuracy_level in (0, 4):
        model = group_model(accuracy_level)
        rep = sonnx.prepare(model)
        x = RNG.standard_normal((5, K)).astype(F32)
        grouped = [y.numpy() for y in rep.run([x])]
        alone = rep.run([x], all_outputs=True)
        assert kernels_used(rep)["k"] == ORT_KERNEL
        for name, got in zip(("q.y", "k.y", "v.y", "o.y"), grouped, strict=False):
            np.testing.assert_array_equal(got, alone[name].numpy())


def test_threads_share_one_prepared_model_with_groups():
    model = group_model(4)
    rep = sonnx.prepare(model)
    inputs = [RNG.standard_normal((i % 3 + 1, K)).astype(F32) for i in range(8)]
    expected = [ort_run(model, {"X": x}) for x in inputs]
    found: dict[int, list[list[np.ndarray]]] = {}

    def work(i: int) -> None:
        found[i] = [[y.numpy() for y in rep.run([inputs[i]])] for _ in range(5)]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(found) == list(range(8))
    for i, runs in found.items():
        assert len(runs) == 5
        for got in runs:
            assert_onnxruntimes(got, expected[i])


def test_no_group_when_kernels_is_torch(counted_runs):
    model = group_model(4)
    x = RNG.standard_normal((2, K)).astype(F32)
    expected = ort_run(model, {"X": x})
    rep = sonnx.prepare(model, kernels="torch")
    got = [y.numpy() for y in rep.run([x])]
    assert counted_runs == []
    assert set(kernels_used(rep).values()) == {TORCH_KERNEL}
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-4)


def test_no_group_when_its_input_needs_a_gradient(counted_runs):
    """A float layer before the products trains: the members run torch's path, whose backward
    reaches W; the gradient equals the same model's with torch's kernels."""
    model = group_model(0, float_before=True)
    x = RNG.standard_normal((2, K)).astype(F32)
    grads = {}
    for kernels in ("onnxruntime", "torch"):
        rep = sonnx.prepare(model, kernels=kernels)
        autograd.training = True
        try:
            outs = rep.run([x])
            sums = [autograd.reduce_sum(y, keepdims=0) for y in outs[:3]]
            loss = autograd.add(autograd.add(sums[0], sums[1]), sums[2])
            grads[kernels] = {p.name: g.numpy() for p, g in autograd.backward(loss)}
        finally:
            autograd.training = False
        assert set(kernels_used(rep).values()) == {TORCH_KERNEL}
    assert not [r for r in counted_runs if len(r) > 1]  # no group ran
    assert (
        set(grads["onnxruntime"]) == {"W", "v.bias"} and np.abs(grads["onnxruntime"]["W"]).max() > 0
    )
    np.testing.assert_array_equal(grads["onnxruntime"]["W"], grads["torch"]["W"])


def test_a_member_onnxruntime_refuses_breaks_the_group_with_one_warning_naming_it():
    # onnxruntime's CPU kernel refuses 8-bit weights with float zero points; torch computes it.
    model = group_model(0, third=("float", 8))
    x = RNG.standard_normal((2, K)).astype(F32)
    rep = sonnx.prepare(model)
    with pytest.warns(RuntimeWarning, match="MatMulNBits node 'v'.*the torch path runs") as seen:
        got = [y.numpy() for y in rep.run([x])]
    assert len([w for w in seen if issubclass(w.category, RuntimeWarning)]) == 1
    used = kernels_used(rep)
    assert (used["q"], used["k"], used["v"]) == (ORT_KERNEL, ORT_KERNEL, TORCH_KERNEL)
    plain = [y.numpy() for y in sonnx.prepare(model, kernels="torch").run([x])]
    np.testing.assert_array_equal(got[2], plain[2])
    alone = rep.run([x], all_outputs=True)  # each node alone, q and k by onnxruntime
    np.testing.assert_array_equal(got[0], alone["q.y"].numpy())
    np.testing.assert_array_equal(got[1], alone["k.y"].numpy())


def test_graph_mode_compiles_the_group_once_for_two_lengths(tmp_path, monkeypatch, counted_runs):
    monkeypatch.setenv("SONNX_CACHE_DIR", str(tmp_path))
    model = group_model(4)
    rep = sonnx.prepare(model, use_graph=True)
    for rows in (1, 4):
        x = RNG.standard_normal((rows, K)).astype(F32)
        expected = ort_run(model, {"X": x})
        counted_runs.clear()
        got = [y.numpy() for y in rep.run([x])]
        assert_onnxruntimes(got, expected)
        # o's run beside each group's (a first run checks the graph against an eager run)
        group = ("y_0", "y_1", "y_2")
        assert counted_runs.count(group) >= 1
        assert sorted(counted_runs) == sorted([("y",), group] * counted_runs.count(group))
    assert [p.compiled for p in rep.graph_runner.parts()] == [True]
    assert len(list((tmp_path / "graphs").glob("*/*/graph.json"))) == 1
    assert f"{GROUPED_KERNEL} kernel" in rep.explain([x])


def test_the_grouped_operator_runs_every_member_in_one_call():
    """``sonnx::matmul_nbits_group_ort`` called directly, as a compiled graph calls it."""
    initializers = []
    nodes = [nbits_node(n, "X", w, None, 4, initializers) for n, w in (("a", 3), ("b", 9))]
    arrays = {t.name: torch.from_numpy(numpy_helper.to_array(t).copy()) for t in initializers}
    x = torch.from_numpy(RNG.standard_normal((2, 3, K)).astype(F32))
    weights = []
    for name in "ab":
        weights += [arrays[f"{name}.B"], arrays[f"{name}.scales"], None, None, None]
    attrs = [K, 3, 4, 32, 4, K, 9, 4, 32, 4]
    ya, yb = torch.ops.sonnx.matmul_nbits_group_ort(x, weights, attrs)
    assert ya.shape == (2, 3, 3) and yb.shape == (2, 3, 9)
    for node, y in zip(nodes, (ya, yb), strict=True):
        graph = helper.make_graph(
            [node], "one", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [6, K])],
            [helper.make_empty_tensor_value_info(node.output[0])],
            [t for t in initializers if t.name.startswith(node.name)],
        )  # fmt: skip
        opsets = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
        alone = helper.make_model(graph, opset_imports=opsets, ir_version=10)
        (expected,) = ort_run(alone, {"X": x.reshape(6, K).numpy()})
        np.testing.assert_array_equal(y.reshape(6, -1).numpy(), expected)
