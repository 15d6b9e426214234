"""sonnx.save names the path it was given, never its temporary file (issue 47 item 17)."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

import sonnx
from sonnx.errors import BadInputError


def _model() -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_directory_is_named_with_a_file_to_give_instead(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="is a directory; give the file to write") as e:
        sonnx.save(_model(), tmp_path)
    assert str(tmp_path / "model.onnx") in str(e.value) and ".tmp" not in str(e.value)


def test_a_parent_that_is_a_file_is_named(tmp_path: Path) -> None:
    blocking = sonnx.save(_model(), tmp_path / "m.onnx")
    with pytest.raises(BadInputError, match=f"{blocking} is a file, not a directory"):
        sonnx.save(_model(), blocking / "deeper" / "x.onnx")


def test_an_os_error_names_the_path_given(tmp_path: Path, monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(tmp_path / ".x.onnx.tmp123"))

    monkeypatch.setattr(onnx, "save_model", refuse)
    target = tmp_path / "x.onnx"
    with pytest.raises(PermissionError, match=f"save: cannot write {target}: Permission denied"):
        sonnx.save(_model(), target)
    assert not target.exists() and list(tmp_path.iterdir()) == []
