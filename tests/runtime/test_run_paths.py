"""Which way a run goes, said by SingaRep.explain and SONNX_DEBUG (sonnx.runtime.run_paths); graph
mode's parts are checked in test_graph_mode.py, where a model is compiled anyway."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sonnx
from sonnx import autograd
from sonnx.testing import torch_models as tm


@pytest.fixture(scope="module")
def cnn_rep() -> sonnx.SingaRep:
    return sonnx.prepare(tm.export(tm.SmallCNN(), (torch.randn(1, 3, 16, 16),), 17, ["input"]))


def _image(batch: int) -> np.ndarray:
    return np.random.default_rng(batch).standard_normal((batch, 3, 16, 16)).astype(np.float32)


def test_explain_tells_the_step_loop_of_a_first_run_from_the_plan_of_a_later_one(cnn_rep):
    x = _image(3)
    first = cnn_rep.explain([x])
    assert first.startswith("the program: prepared without use_graph=True")
    assert "the step loop runs the first run of these input shapes" in first
    cnn_rep.run([x])
    assert "the generated plan runs" in cnn_rep.explain([x])
    assert "fused groups, each run as one step" in cnn_rep.explain([x])


def test_explain_names_why_the_step_loop_runs(cnn_rep, monkeypatch):
    assert "a cut runs part of the steps" in cnn_rep.explain(last_layers=-3)
    assert "every value is asked for" in cnn_rep.explain(all_outputs=True)
    monkeypatch.setattr(autograd, "training", True)
    assert "the program: prepared without use_graph=True" in cnn_rep.explain()
    monkeypatch.setenv("SONNX_DEBUG", "1")
    assert "SONNX_DEBUG is set" in cnn_rep.explain()


def test_sonnx_debug_prints_the_path_and_every_node_with_its_outputs(cnn_rep, monkeypatch, capsys):
    x = _image(2)
    cnn_rep.run([x])  # a plan exists for this signature: the trace must still show every node
    monkeypatch.setenv("SONNX_DEBUG", "1")
    (traced,) = cnn_rep.run([x])
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "[sonnx] run: the program (prepared without use_graph=True)"
    traced_nodes = [line.split()[2] for line in lines[1:]]
    assert traced_nodes == [step.info.name for step in cnn_rep.steps]  # fused Convs included
    last = cnn_rep.steps[-1]
    assert f"-> {last.outputs[0]}: float32[2, " in lines[-1]
    monkeypatch.delenv("SONNX_DEBUG")
    (fused,) = cnn_rep.run([x])
    np.testing.assert_allclose(traced.numpy(), fused.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kind", ["constant", "input"])
def test_explain_says_a_graph_mode_run_with_nothing_to_compute(kind):
    """A model whose output is a constant (folded when prepared) or its input has no step: the
    run computed nothing, which explain() says rather than counting 0 compiled segments."""
    from onnx import TensorProto, helper

    if kind == "constant":
        value = helper.make_tensor("v", TensorProto.FLOAT, [2], [1, 2])
        nodes, inputs = [helper.make_node("Constant", [], ["y"], value=value)], []
    else:
        nodes, inputs = [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])]
    graph = helper.make_graph(
        nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])]
    )
    rep = sonnx.prepare(helper.make_model(graph), use_graph=True)
    feeds = [np.array([1, 2], np.float32)] if inputs else []
    np.testing.assert_array_equal(rep.run(feeds)[0].numpy(), [1, 2])
    last = rep.explain().splitlines()[-1]
    assert last == "  last run: nothing computed: every output is an input or a constant"
