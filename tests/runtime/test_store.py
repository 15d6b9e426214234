"""Compiled graphs kept on disk (``sonnx.runtime.store``): a second runner, or a second
process, loads what the first compiled; changed weights, a damaged entry or the store turned
off compile afresh. Each test has its own empty store (``SONNX_CACHE_DIR``, tests/conftest.py);
those that start from a stored graph copy in the ConvNet's, compiled once for the module.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper
from torch import nn

import sonnx
from sonnx.runtime import compiled_graphs
from sonnx.runtime.store import WeightDigests, digest, graph_digest, store_root
from sonnx.tensor import to_numpy
from sonnx.testing import torch_models as tm
from tests.onnx.switch_models import switch_model
from tests.runtime.graph_mode_models import compile_into_store, copy_store, one_input_model


class _ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x)).mean((2, 3))


def _model() -> onnx.ModelProto:
    torch.manual_seed(0)
    return tm.export(_ConvNet(), (torch.randn(2, 3, 8, 8),), 17, ["x"])


def _image(batch: int = 2) -> np.ndarray:
    return np.random.default_rng(0).standard_normal((batch, 3, 8, 8)).astype(np.float32)


@pytest.fixture(scope="module")
def stored_convnet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store holding the graph ``_model()`` compiles for ``_image()``: one compile for the
    tests that need a stored graph to start from (each copies it)."""
    root = tmp_path_factory.mktemp("stored_convnet")
    assert compile_into_store(root, _model(), [_image()]) == 1
    return root


def _stored_entries() -> list[Path]:
    root = store_root()
    assert root is not None
    return sorted(p for p in (root / "graphs").glob("*/*") if p.is_dir())


def test_a_second_runner_loads_the_compiled_graph_instead_of_compiling() -> None:
    model, x = _model(), _image()
    first = sonnx.prepare(model, use_graph=True)
    expected = to_numpy(first.run([x])[0])
    assert (first.graph_runner.compile_count, first.graph_runner.loaded_count) == (1, 0)
    assert len(_stored_entries()) == 1
    second = sonnx.prepare(model, use_graph=True)
    np.testing.assert_array_equal(to_numpy(second.run([x])[0]), expected)
    assert (second.graph_runner.compile_count, second.graph_runner.loaded_count) == (0, 1)


def test_changed_weights_compile_a_graph_of_their_own_kept_in_memory(stored_convnet) -> None:
    copy_store(stored_convnet)
    model, x = _model(), _image()
    changed = sonnx.prepare(model, use_graph=True)
    weight = next(t for t in changed.tensor_map.values() if t.data.dim() == 4)
    with torch.no_grad():
        weight.data.mul_(-1.0)
    got = to_numpy(changed.run([x])[0])
    assert changed.graph_runner.compile_count == 1
    assert len(_stored_entries()) == 1  # weights changed in this process are not stored
    eager = sonnx.prepare(model)
    eager_weight = next(t for t in eager.tensor_map.values() if t.data.dim() == 4)
    with torch.no_grad():
        eager_weight.data.mul_(-1.0)
    np.testing.assert_allclose(got, to_numpy(eager.run([x])[0]), rtol=1e-5, atol=1e-6)


def _switch_over_outer_weights() -> onnx.ModelProto:
    """``If (mode == 1)`` whose branches each read three weights of the enclosing graph (the
    names a subgraph reads from outside are part of the store's key)."""

    def branch(name: str, weights: str) -> onnx.GraphProto:
        w0, w1, w2 = (f"{name}_{c}" for c in weights)
        nodes = [
            helper.make_node("MatMul", ["x", w0], [f"{name}_mm"]),
            helper.make_node("Add", [f"{name}_mm", w1], [f"{name}_add"]),
            helper.make_node("Mul", [f"{name}_add", w2], [name]),
        ]
        out = [helper.make_tensor_value_info(name, TensorProto.FLOAT, None)]
        return helper.make_graph(nodes, name, [], out)

    rng = np.random.default_rng(0)
    weights = [
        helper.make_tensor(f"{b}_{c}", TensorProto.FLOAT, dims, rng.standard_normal(dims).ravel())
        for b, cs in (("then", "pqr"), ("else", "stu"))
        for c, dims in zip(cs, ([4, 4], [4], [4]), strict=True)
    ]
    return switch_model(
        "switch_over_outer_weights",
        branch("then", "pqr"),
        branch("else", "stu"),
        x_width=4,
        initializers=weights,
        y_shape=["n", 4],
    )


@pytest.mark.parametrize("name", ["convnet", "switch"])
def test_a_new_process_loads_what_an_earlier_process_compiled(tmp_path: Path, name: str) -> None:
    """The store's keys are digests of bytes, not of Python hashes: they are the same in
    every process (another ``PYTHONHASHSEED`` each time), also where a subgraph reads
    several names of the enclosing graph (once listed in the order of a set). The process
    that only loads never imports inductor (1-2 s of a cold start)."""
    path = tmp_path / "model.onnx"
    if name == "convnet":
        onnx.save(_model(), str(path))
        feeds = "[np.load({!r})]".format(str(tmp_path / "x.npy"))
        np.save(tmp_path / "x.npy", _image(3))
    else:
        onnx.save(_switch_over_outer_weights(), str(path))
        feeds = "[np.ones((3, 4), np.float32), np.array(1, np.int64)]"
    script = textwrap.dedent(
        f"""
        import sys, numpy as np, sonnx
        rep = sonnx.prepare({str(path)!r}, use_graph=True)
        y = sonnx.tensor.to_numpy(rep.run({feeds})[0])
        inductor = "torch._inductor" in sys.modules
        print(rep.graph_runner.compile_count, rep.graph_runner.loaded_count, inductor,
              y.tobytes().hex())
        """
    )
    runs = []
    for seed in ("1", "2"):
        env = {k: v for k, v in os.environ.items() if k != "PYTHONHASHSEED"}
        env["PYTHONHASHSEED"] = seed
        done = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600
        )
        assert done.returncode == 0, done.stderr
        runs.append(done.stdout.split())
    assert runs[0][:3] == ["1", "0", "True"] and runs[1][:3] == ["0", "1", "False"]
    assert runs[0][3] == runs[1][3]


def test_with_the_store_off_nothing_is_written(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SONNX_CACHE_DIR", "off")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert store_root() is None
    model, x = _model(), _image()
    for _ in range(2):
        rep = sonnx.prepare(model, use_graph=True)
        rep.run([x])
        assert (rep.graph_runner.compile_count, rep.graph_runner.loaded_count) == (1, 0)
    assert list(tmp_path.iterdir()) == []


def test_an_unwritable_store_warns_and_compiles_into_memory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    not_a_directory = tmp_path / "file"
    not_a_directory.write_text("")
    monkeypatch.setenv("SONNX_CACHE_DIR", str(not_a_directory))
    model, x = _model(), _image()
    rep = sonnx.prepare(model, use_graph=True)
    with pytest.warns(RuntimeWarning, match="cannot store compiled graphs"):
        got = to_numpy(rep.run([x])[0])
    np.testing.assert_allclose(got, to_numpy(sonnx.prepare(model).run([x])[0]), rtol=1e-5)
    assert (rep.graph_runner.compile_count, rep.graph_runner.fallback) == (1, None)


def test_a_damaged_stored_graph_is_skipped_with_a_warning_and_compiled_again(
    stored_convnet,
) -> None:
    copy_store(stored_convnet)
    model, x = _model(), _image()
    intact = sonnx.prepare(model, use_graph=True)
    expected = to_numpy(intact.run([x])[0])
    assert intact.graph_runner.loaded_count == 1
    (entry,) = _stored_entries()
    (entry / "guards.txt").write_text("L['t0'].size()[0] <=")
    rep = sonnx.prepare(model, use_graph=True)
    with pytest.warns(RuntimeWarning, match="ignores the stored graph"):
        got = to_numpy(rep.run([x])[0])
    np.testing.assert_array_equal(got, expected)
    assert rep.graph_runner.compile_count == 1


def test_a_failed_compile_leaves_nothing_in_the_store(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args: object) -> None:
        raise RuntimeError("inductor failed")

    monkeypatch.setattr(compiled_graphs, "compile_library", fail)
    monkeypatch.setattr("sonnx.runtime.symbolic_graphs.compile_library", fail)
    model, x = _model(), _image()
    rep = sonnx.prepare(model, use_graph=True)
    with pytest.warns(RuntimeWarning, match="inductor failed"):
        got = to_numpy(rep.run([x])[0])
    np.testing.assert_allclose(got, to_numpy(sonnx.prepare(model).run([x])[0]), rtol=1e-6)
    root = store_root()
    assert root is not None and list((root / "graphs").iterdir()) == []


def _nonzero_model() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("NonZero", ["r"], ["where"], name="nonzero"),
        helper.make_node("Cast", ["where"], ["y"], name="cast", to=TensorProto.FLOAT),
    ]
    return one_input_model(nodes, "nonzero")


def test_the_steps_found_to_run_eagerly_are_known_to_the_next_runner() -> None:
    model = _nonzero_model()
    x = np.array([[1.0, -1.0, 2.0]], np.float32)
    with pytest.warns(RuntimeWarning, match="node 'nonzero'"):
        sonnx.prepare(model, use_graph=True).run([x])
    with pytest.warns(RuntimeWarning, match="node 'nonzero'"):
        rep = sonnx.prepare(model, use_graph=True)
    assert [rep.steps[i].info.name for i in rep.graph_runner.eager_steps] == ["nonzero"]
    np.testing.assert_array_equal(to_numpy(rep.run([x])[0]), [[0, 0], [0, 2]])
    assert rep.graph_runner.loaded_count == 2  # the segments before and after the NonZero


def test_weight_digests_follow_the_bytes_and_in_place_changes() -> None:
    digests = WeightDigests()
    a, b = torch.arange(6.0).reshape(2, 3), torch.arange(6.0).reshape(2, 3)
    assert digests.of(a) == digests.of(b)
    assert digests.of(a) != digests.of(a.reshape(3, 2).contiguous())
    assert digests.of(a) != digests.of(a.to(torch.float64))
    before = digests.of(a)
    a.add_(1.0)
    assert digests.of(a) != before
    assert digests.of(torch.zeros(0)) == digests.of(torch.zeros(0))


def test_the_graph_digest_ignores_initializer_values_but_not_the_nodes() -> None:
    model = _model()
    opsets = {"": 17}
    base = graph_digest(model.graph, opsets)
    other_values = onnx.ModelProto()
    other_values.CopyFrom(model)
    init = other_values.graph.initializer[0]
    array = onnx.numpy_helper.to_array(init) + 1.0
    init.CopyFrom(onnx.numpy_helper.from_array(array, init.name))
    assert graph_digest(other_values.graph, opsets) == base
    other_nodes = onnx.ModelProto()
    other_nodes.CopyFrom(model)
    other_nodes.graph.node[-1].name = "renamed"
    assert graph_digest(other_nodes.graph, opsets) != base
    assert graph_digest(model.graph, {"": 18}) != base


def test_the_cache_command_reports_and_clears_the_store(
    capsys: pytest.CaptureFixture[str], stored_convnet
) -> None:
    from sonnx import cli

    copy_store(stored_convnet)
    assert cli.main(["cache"]) == 0
    assert f"{store_root()}: 1 compiled graphs" in capsys.readouterr().out
    assert cli.main(["cache", "--clear"]) == 0
    assert ": 0 compiled graphs, 0.0 MiB" in capsys.readouterr().out
    assert _stored_entries() == []


def test_the_key_depends_on_the_thread_count() -> None:
    """inductor compiles its loops for the threads torch has at compile time."""
    threads = torch.get_num_threads()
    try:
        keys = set()
        for n in (1, 2):
            torch.set_num_threads(n)
            keys.add(digest(["model", 0, 1]))
    finally:
        torch.set_num_threads(threads)
    assert len(keys) == 2
