"""Whole models export: round trips through ``sonnx.prepare``, imported ONNX files (the onnx
wheel's ``light_*`` zoo models and torch-exported networks) re-exported after a sonnx run,
import → export → import as a fixed point, multi-output / integer / boolean / shared-weight
graphs, older target opsets, and ``save`` (atomic, external data for large models)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper
from onnx.backend.test.runner import Runner

import sonnx
import sonnx.autograd as ag
from sonnx.errors import ExportError
from sonnx.onnx import exporter
from sonnx.onnx.exporter import default_opset, save, to_onnx
from sonnx.operators.image.grid import affine_grid
from sonnx.tensor import Tensor, to_numpy
from sonnx.testing import torch_models as tm
from tests.onnx.export_check import (
    assert_same,
    const,
    export_check,
    ort_session,
    param,
    rng_inputs,
    run_eager,
)

F, I64 = np.float32, np.int64
DATA = Path(onnx.__file__).parent / "backend" / "test" / "data"
LIGHT = sorted(p.stem for p in (DATA / "light").glob("light_*.onnx") if "_output_" not in p.stem)


def w(*shape: int):
    return param(np.random.default_rng(list(shape)).standard_normal(shape).astype(F))


def small_net(x: Tensor) -> tuple[Tensor, Tensor]:
    """Conv → BN → ReLU → pool → flatten → linear; returns (logits, probabilities)."""
    y = ag.conv2d(x, w(4, 3, 3, 3), w(4), 1, 1)
    y = ag.batch_norm(y, const(np.ones(4, F)), w(4), const(np.zeros(4, F)), const(np.ones(4, F)))
    y = ag.max_pool2d(ag.relu(y), 2)
    logits = ag.add(ag.matmul(ag.flatten(y), w(16, 3)), w(3))
    return logits, ag.softmax(logits, 1)


# ---- round trips ------------------------------------------------------------------------------


def test_export_then_prepare_gives_the_same_outputs() -> None:
    make = rng_inputs(((3, 4, 4), F))
    model = export_check(small_net, make)
    rep = sonnx.prepare(model)
    for batch in (2, 5):
        (x,) = make(batch)
        _, expected = run_eager(small_net, [x])
        for e, g in zip(expected, rep.run([x]), strict=True):
            assert_same(to_numpy(e), to_numpy(g), 1e-5, 1e-6, "prepare(export)")


def _feeds(model: onnx.ModelProto, name: str) -> dict[str, np.ndarray]:
    """Inputs generated as onnx's backend runner generates them for its stored outputs."""
    initializers = {i.name for i in model.graph.initializer}
    return {
        x.name: Runner.generate_dummy_data(x, seed=0, name=name, random=False)
        for x in model.graph.input
        if x.name not in initializers
    }


def _reexport(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> onnx.ModelProto:
    """Import ``model``, run it in sonnx on ``feeds`` and export what that run recorded."""
    inputs = [Tensor(data=v, requires_grad=False, name=k) for k, v in feeds.items()]
    outputs = sonnx.prepare(model).run({t.name: t for t in inputs})
    exported = to_onnx(inputs, outputs, model_name=model.graph.name)
    onnx.checker.check_model(exported, full_check=True)
    return exported


def _op_types(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in model.graph.node if n.op_type != "Constant"]


def _initializers(model: onnx.ModelProto) -> list[np.ndarray]:
    return sorted(
        (numpy_helper.to_array(i) for i in model.graph.initializer),
        key=lambda a: (a.shape, a.dtype.str, a.tobytes()),
    )


def _assert_fixed_point(
    first: onnx.ModelProto, feeds: dict[str, np.ndarray], same_order: bool = True
) -> None:
    """Import → export of an exported model gives the same ops and initializers again.

    ``same_order=False`` where an operator exported as several nodes: re-imported, those are
    separate operators that the depth-first export may list in another (equally valid) order.
    """
    second = _reexport(first, feeds)
    if same_order:
        assert _op_types(second) == _op_types(first)
    assert Counter(_op_types(second)) == Counter(_op_types(first))
    a, b = _initializers(first), _initializers(second)
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("name", LIGHT)
def test_light_model_reexports_to_the_same_ops_and_outputs(name: str) -> None:
    model = onnx.load(DATA / "light" / f"{name}.onnx")
    feeds = _feeds(model, name)
    exported = _reexport(model, feeds)
    expected = ort_session(model).run(None, feeds)
    got = ort_session(exported).run(None, feeds)
    for k, (e, g) in enumerate(zip(expected, got, strict=True)):
        assert_same(e, g, 1e-4, 1e-5, f"{name} output {k}")
    # An imported model exports its own graph: the same nodes in the same order, names and
    # attributes included, and the same initializers.
    assert list(exported.graph.node) == list(model.graph.node)
    _assert_fixed_point(exported, feeds)


def _torch_cases():
    torch.manual_seed(0)
    image = (
        tm.SmallCNN(),
        ["x"],
        lambda b: [np.random.default_rng(b).standard_normal((b, 3, 16, 16)).astype(F)],
    )
    yield pytest.param(*image, id="SmallCNN")
    yield pytest.param(
        tm.TinyBert(),
        ["input_ids", "attention_mask"],
        lambda b: [t.numpy() for t in tm.bert_inputs(b, seed=b)],
        id="TinyBert",
    )
    big_image = lambda b: [np.random.default_rng(b).standard_normal((b, 3, 32, 32)).astype(F)]  # noqa: E731
    yield pytest.param(tm.ResNet18(width=16, num_classes=10), ["x"], big_image, id="ResNet18")
    yield pytest.param(tm.MobileNetV2(num_classes=10), ["x"], big_image, id="MobileNetV2")


@pytest.mark.parametrize(("module", "names", "make"), list(_torch_cases()))
def test_torch_exported_model_reexports_and_matches_at_two_batch_sizes(module, names, make) -> None:
    example = tuple(torch.from_numpy(a) for a in make(2))
    original = tm.export(module, example, 13, names)
    exported = _reexport(original, dict(zip(names, make(2), strict=True)))
    reference, session = ort_session(original), ort_session(exported)
    for batch in (2, 5):
        feeds = dict(zip(names, make(batch), strict=True))
        for e, g in zip(reference.run(None, feeds), session.run(None, feeds), strict=True):
            assert_same(e, g, 1e-4, 1e-5, f"batch {batch}")
    _assert_fixed_point(exported, dict(zip(names, make(2), strict=True)))


# ---- graph shapes: several outputs, integer and boolean tensors, shared weights ----------------


def test_multi_output_model_with_integer_and_boolean_tensors() -> None:
    def build(x, ids, keep):
        emb = ag.gather(w(6, 3), 0, ids)  # integer indices
        masked = ag.where(emb, ag.mul(emb, 0.0), keep)  # boolean condition
        top, where_top = ag.topk(ag.reduce_sum(masked, [1], 0), 2, -1)
        count = ag.reduce_sum(ag.cast(keep, np.int64), [1, 2], 0)  # integer output
        return x + top, where_top, count, ag._not(keep), ag.shape(x)

    make = rng_inputs(
        ((2,), F),
        ((4,), lambda r, s: r.integers(0, 6, s)),
        ((4, 3), np.bool_),
    )
    model = export_check(build, make)
    types = [o.type.tensor_type.elem_type for o in model.graph.output]
    P = onnx.TensorProto
    assert types == [P.FLOAT, P.INT64, P.INT64, P.BOOL, P.INT64]
    assert len(model.graph.output) == 5


def test_shared_weights_are_stored_once() -> None:
    shared = w(4, 4)
    bias = w(4)

    def build(x):
        h = ag.relu(ag.matmul(x, shared) + bias)
        h = ag.relu(ag.matmul(h, shared) + bias)
        return ag.matmul(h, shared), ag.matmul(x, shared)

    model = export_check(build, rng_inputs(((4,), F)))
    assert len(model.graph.initializer) == 2
    matmul_weights = {n.input[1] for n in model.graph.node if n.op_type == "MatMul"}
    assert len(matmul_weights) == 1


def test_the_same_tensor_twice_as_output_gets_two_names() -> None:
    def build(x):
        y = ag.relu(x)
        return y, y, x

    model = export_check(build, rng_inputs(((3,), F)))
    names = [o.name for o in model.graph.output]
    assert len(set(names)) == 3


def test_output_shapes_follow_the_symbolic_batch() -> None:
    def build(x):
        return ag.reshape(x, [-1]), ag.reduce_mean(x, [0, 1], 0), ag.transpose(x, [1, 0])

    model = export_check(build, rng_inputs(((3,), F)))
    dims = [
        [d.dim_param or d.dim_value for d in o.type.tensor_type.shape.dim]
        for o in model.graph.output
    ]
    assert dims[1] == [] and dims[2] == [3, "batch"]
    assert len(dims[0]) == 1 and dims[0][0] != 6  # batch * 3, not the traced 6


def test_without_dynamic_batch_shapes_are_the_traced_ones() -> None:
    model = export_check(small_net, rng_inputs(((3, 4, 4), F)), batches=(2,), dynamic_batch=False)
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    assert dims == [2, 3, 4, 4]
    assert [d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim] == [2, 3]


# ---- target opsets ----------------------------------------------------------------------------


def mixed_net(x: Tensor, ids: Tensor) -> tuple[Tensor, ...]:
    """Ops whose ONNX form changed between opset 11 and today (axes/pads/split as inputs)."""
    y = ag.conv2d(x, w(4, 3, 3, 3), None, 1, [1, 0, 1, 2], 1)
    y = ag.batch_norm(y, const(np.ones(4, F)), w(4), const(np.zeros(4, F)), const(np.ones(4, F)))
    y = ag.avg_pool2d(ag.clip(y, -1.0, 1.0), 2, 1, 1, False, False)
    y = ag.pad(ag.unsqueeze(ag.squeeze(ag.reduce_sum(y, [2]), [2]), [2]), "constant", [0] * 8)
    a, b = ag.split(ag.flatten(y), 1, [12, 12])
    emb = ag.gather(w(5, 12), 0, ids)
    out = ag.softmax(ag.reduce_mean(ag.unsqueeze(a + b, 1) + emb, [1], 0), 1)
    return out, ag.argmax(out, 1, 0), ag.slice(out, [0], [5], [1])


@pytest.mark.parametrize("opset", [11, 13, 17, None])
def test_mixed_model_exports_at_old_and_default_opsets(opset: int | None) -> None:
    make = rng_inputs(((3, 5, 5), F), ((2,), lambda r, s: r.integers(0, 5, s)))
    model = export_check(mixed_net, make, opset=opset)
    assert model.opset_import[0].version == (opset or default_opset())


def test_default_export_opset_is_fixed_and_lowered_to_what_the_nodes_need() -> None:
    # Default target 18 whatever onnxruntime is installed; the model imports the newest
    # since-version its nodes have at 18 (Relu-14, Gemm-13, ...), no higher.
    assert default_opset() == 18
    inputs, outputs = run_eager(small_net, rng_inputs(((3, 4, 4), F))(2))
    model = to_onnx(inputs, list(outputs))
    needed = max(onnx.defs.get_schema(n.op_type, 18, "").since_version for n in model.graph.node)
    assert model.opset_import[0].version == needed <= 18


def test_default_opset_rises_to_the_first_that_has_a_node() -> None:
    # AffineGrid has no decomposition into older operators: the default target rises to 20.
    theta = Tensor(data=np.zeros((2, 2, 3), F), requires_grad=False)
    y = affine_grid(theta, [2, 1, 4, 4])
    model = to_onnx([theta], [y])
    assert model.opset_import[0].version == 20
    with pytest.raises(ExportError, match="does not exist at opset 18"):
        to_onnx([theta], [y], opset=18)


# ---- save -------------------------------------------------------------------------------------


def test_save_writes_a_loadable_model_and_leaves_no_temporary_files(tmp_path: Path) -> None:
    inputs, outputs = run_eager(small_net, rng_inputs(((3, 4, 4), F))(2))
    model = to_onnx(inputs, list(outputs))
    path = save(model, tmp_path / "sub" / "net.onnx")
    assert path == tmp_path / "sub" / "net.onnx"
    assert sorted(p.name for p in path.parent.iterdir()) == ["net.onnx"]
    assert onnx.load(path) == model
    save(model, path)  # overwriting replaces the file in one step
    assert sorted(p.name for p in path.parent.iterdir()) == ["net.onnx"]


def test_large_models_use_external_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    big = param(np.random.default_rng(0).standard_normal((64, 64)).astype(F))
    x = Tensor(data=np.ones((2, 64), F), requires_grad=False, name="x")
    model = to_onnx([x], [ag.matmul(x, big)])
    monkeypatch.setattr(exporter, "EXTERNAL_DATA_THRESHOLD", 8 * 1024)
    path = save(model, tmp_path / "big.onnx")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.onnx", "big.onnx.data"]
    assert path.stat().st_size < 4096 < (tmp_path / "big.onnx.data").stat().st_size
    assert model.graph.initializer[0].HasField("raw_data")  # the caller's model is untouched
    save(model, path)  # saving again rewrites the data file instead of appending to it
    assert (tmp_path / "big.onnx.data").stat().st_size == 64 * 64 * 4
    session = ort_session(onnx.load(path))
    (got,) = session.run(None, {"x": x.numpy()})
    np.testing.assert_allclose(got, x.numpy() @ big.numpy(), rtol=1e-5)
