"""The memory guard: outputs sized from run-time values, and tensors a model file declares,
are refused before allocation when they exceed ``SONNX_MAX_TENSOR_BYTES``."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

import sonnx
from sonnx.engine import memory_guard
from sonnx.errors import BadInputError, BadModelError, ResourceLimitError
from sonnx.operators.image.resize import Resize
from sonnx.operators.indexing.masks import OneHot
from sonnx.operators.randomness.generators import RandomNormal
from sonnx.operators.shape.create import ConstantOfShape, Range
from sonnx.operators.shape.layout import Expand, Tile
from sonnx.operators.shape.padding import Pad

TB = 1 << 40


def _rss_bytes() -> int:
    """This process's resident memory now (not its peak)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _model(nodes, inits, inputs=(), outputs=("y",), opset=17) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _ints(name: str, values: list[int]) -> TensorProto:
    return helper.make_tensor(name, TensorProto.INT64, [len(values)], values)


def test_a_4_tb_constant_of_shape_is_refused_without_allocating() -> None:
    model = _model(
        [helper.make_node("ConstantOfShape", ["shape"], ["y"], name="huge")],
        [_ints("shape", [1000, 1000, 1000, 1000])],  # 10**12 float32 = 4 TB
    )
    rep = sonnx.prepare(model)
    before = _rss_bytes()
    with pytest.raises(ResourceLimitError) as info:
        rep.run([])
    assert _rss_bytes() - before < 64 << 20
    message = str(info.value)
    assert "'huge' (ConstantOfShape-9)" in message
    assert "3.6 TiB" in message and "limit" in message
    assert message.endswith("received shape (1000, 1000, 1000, 1000)")
    assert isinstance(info.value, BadModelError)  # a ResourceLimitError is a model problem


def test_a_huge_expand_is_refused_without_allocating() -> None:
    model = _model(
        [helper.make_node("Expand", ["x", "shape"], ["y"], name="wide")],
        [_ints("shape", [10**6, 10**6, 2, 3])],
        inputs=["x"],
    )
    rep = sonnx.prepare(model)
    before = _rss_bytes()
    with pytest.raises(
        ResourceLimitError, match=r"'wide' \(Expand-13\).*\(1000000, 1000000, 2, 3\)"
    ):
        rep.run([np.ones((2, 3), np.float32)])
    assert _rss_bytes() - before < 64 << 20


def test_initializers_and_constants_declaring_huge_dims_are_refused_at_prepare() -> None:
    huge = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[10**7, 10**7])
    model = _model([helper.make_node("Add", ["x", "w"], ["y"])], [huge], inputs=["x"])
    with pytest.raises(ResourceLimitError, match=r"initializer 'w' .*\(10000000, 10000000\)"):
        sonnx.prepare(model)
    value = TensorProto(name="v", data_type=TensorProto.DOUBLE, dims=[10**5, 10**5, 10])
    constant = helper.make_node("Constant", [], ["y"], value=value, name="c")
    with pytest.raises(ResourceLimitError, match=r"attribute 'value' of node 'c'"):
        sonnx.prepare(_model([constant], []))


def test_the_limit_comes_from_the_environment(monkeypatch) -> None:
    graph = helper.make_graph(
        [helper.make_node("ConstantOfShape", ["shape"], ["y"])],
        "g",
        [helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    rep = sonnx.prepare(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    shape = np.array([64, 64], np.int64)
    monkeypatch.setenv(memory_guard.ENV_VAR, str(64 * 64 * 4))
    assert rep.run([shape])[0].shape == (64, 64)  # exactly at the limit
    monkeypatch.setenv(memory_guard.ENV_VAR, str(64 * 64 * 4 - 1))
    with pytest.raises(ResourceLimitError, match=r"16\.0 KiB on the host, more than the limit"):
        rep.run([shape])
    monkeypatch.setenv(memory_guard.ENV_VAR, "lots")
    with pytest.raises(BadInputError, match="SONNX_MAX_TENSOR_BYTES must be a number"):
        rep.run([shape])


def test_the_default_limit_is_half_the_physical_memory(monkeypatch) -> None:
    monkeypatch.delenv(memory_guard.ENV_VAR, raising=False)
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert memory_guard.max_tensor_bytes() == physical // 2
    assert memory_guard.max_tensor_bytes(torch.device("cpu")) == physical // 2


def _i64(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int64)


@pytest.mark.parametrize(
    ("op", "args", "shape"),
    [
        (ConstantOfShape(), (_i64([2**20, 2**20]),), "(1048576, 1048576)"),
        (Expand(), (torch.ones(1, 3), _i64([2**40, 3])), "(1099511627776, 3)"),
        (Tile(), (torch.ones(2, 3), _i64([2**20, 2**20])), "(2097152, 3145728)"),
        (Range(), (_i64(0), _i64(2**50), _i64(1)), "(1125899906842624,)"),
        (Pad(), (torch.ones(2, 3), _i64([0, 2**40, 0, 0])), "(2, 1099511627779)"),
        (
            Resize(mode="nearest"),
            (torch.ones(1, 1, 2, 2), None, None, _i64([1, 1, 2**21, 2**21])),
            "(1, 1, 2097152, 2097152)",
        ),
        (OneHot(), (_i64([1, 2]), _i64(2**40), torch.tensor([0.0, 1.0])), "(2, 1099511627776)"),
        (RandomNormal(shape=[2**20, 2**20]), (), "(1048576, 1048576)"),
    ],
)
def test_every_value_sized_output_is_checked_before_allocation(op, args, shape) -> None:
    with pytest.raises(ResourceLimitError) as info:
        op.forward(*args)
    assert str(info.value).startswith(f"{op.op_type}: output would need")
    assert str(info.value).endswith(f"received shape {shape}")


def test_within_the_limit_the_guarded_ops_still_run() -> None:
    assert ConstantOfShape().forward(_i64([2, 3])).shape == (2, 3)
    assert Tile().forward(torch.ones(2, 3), _i64([2, 1])).shape == (4, 3)
    assert Range().forward(_i64(0), _i64(5), _i64(2)).tolist() == [0, 2, 4]
    assert Pad().forward(torch.ones(2, 3), _i64([1, 0, 0, 2])).shape == (3, 5)


def test_bytes_are_shown_in_readable_units() -> None:
    with pytest.raises(ResourceLimitError, match=r"need 4\.0 TiB"):
        memory_guard.check_elements("t", TB, 4)
    with pytest.raises(BadInputError, match=r"non-negative dims, received shape \(2, -1\)"):
        memory_guard.check_shape("t", [2, -1], torch.float32)
