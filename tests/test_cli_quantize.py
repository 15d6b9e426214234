"""``sonnx quantize``: the model written equals the library's quantize_static on the same
feeds (a one-input CNN from loose files, a two-input encoder from one folder per feed) and
quantize_weights with the same options; a progress bar on a terminal; one-line errors for a
bad calibration folder or missing options."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from sonnx.cli import main
from sonnx.quantization import quantize_static, quantize_weights
from tests.quantization.models import depthwise_cnn, tiny_bert


def _matmul_model(path: Path) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((64, 16)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="proj")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 16])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path)
    return model


def test_static_from_loose_files(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    model, feeds = depthwise_cnn()
    onnx.save(model, tmp_path / "cnn.onnx")
    (tmp_path / "feeds").mkdir()
    for i, feed in enumerate(feeds):  # any name: one file per feed of the one input
        np.save(tmp_path / "feeds" / f"batch{i}.npy", feed["x"])
    args = [str(tmp_path / "cnn.onnx"), str(tmp_path / "out.onnx")]
    options = ["--calibration", str(tmp_path / "feeds"), "--per-channel"]
    assert main(["quantize", *args, *options, "--calibrate-method", "percentile"]) == 0
    written = onnx.load(tmp_path / "out.onnx")
    expected = quantize_static(model, feeds, per_channel=True, calibrate_method="percentile")
    assert written.SerializeToString() == expected.SerializeToString()
    out = capsys.readouterr().out
    assert out.startswith(f"wrote {tmp_path / 'out.onnx'} (") and "QuantizeLinear" in out


def test_static_from_feed_folders(tmp_path: Path) -> None:
    model, feeds = tiny_bert()
    onnx.save(model, tmp_path / "bert.onnx")
    for i, feed in enumerate(feeds):
        folder = tmp_path / "feeds" / f"{i:02d}"
        folder.mkdir(parents=True)
        for name, value in feed.items():
            np.save(folder / f"{name}.npy", value)
    argv = ["quantize", str(tmp_path / "bert.onnx"), str(tmp_path / "q.onnx")]
    argv += ["--calibration", str(tmp_path / "feeds"), "--activation-type", "uint8"]
    assert main([*argv, "--reduce-range", "--no-progress"]) == 0
    expected = quantize_static(model, feeds, activation_type="uint8", reduce_range=True)
    assert onnx.load(tmp_path / "q.onnx").SerializeToString() == expected.SerializeToString()


def test_weights_only(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    model = _matmul_model(tmp_path / "m.onnx")
    argv = ["quantize", str(tmp_path / "m.onnx"), str(tmp_path / "q.onnx"), "--weights-only"]
    assert main([*argv, "--bits", "4", "--block-size", "16", "--asymmetric"]) == 0
    expected = quantize_weights(model, bits=4, block_size=16, symmetric=False)
    assert onnx.load(tmp_path / "q.onnx").SerializeToString() == expected.SerializeToString()
    assert "(1 MatMulNBits)" in capsys.readouterr().out


def test_progress_bar_on_a_terminal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    model = _matmul_model(tmp_path / "m.onnx")
    (tmp_path / "feeds").mkdir()
    for i in range(3):
        np.save(tmp_path / "feeds" / f"{i}.npy", np.ones((2, 64), np.float32) * i)
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    argv = ["quantize", str(tmp_path / "m.onnx"), str(tmp_path / "q.onnx")]
    assert main([*argv, "--calibration", str(tmp_path / "feeds")]) == 0
    assert "calibrating" in terminal.getvalue() and "3/3" in terminal.getvalue()
    assert model.graph.node[0].op_type == "MatMul"


@pytest.mark.parametrize(
    ("layout", "extra", "words"),
    [
        ("none", [], "--calibration DIR is needed"),
        ("missing", [], "does not exist"),
        ("empty", [], "holds no .npy file and no sub-folder"),
        ("not-npy", [], "is not a NumPy .npy array file"),
        ("loose", ["--weights-only"], "--weights-only takes no --calibration feeds"),
        ("mixed", [], "holds both .npy files and sub-folders"),
    ],
)
def test_calibration_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture, layout: str, extra: list[str], words: str
) -> None:
    _matmul_model(tmp_path / "m.onnx")
    feeds = tmp_path / "feeds"
    if layout not in ("none", "missing"):
        feeds.mkdir()
    if layout in ("loose", "mixed"):
        np.save(feeds / "a.npy", np.zeros((1, 64), np.float32))
    if layout == "mixed":
        (feeds / "sub").mkdir()
    if layout == "not-npy":
        (feeds / "a.npy").write_text("not an array")
    argv = ["quantize", str(tmp_path / "m.onnx"), str(tmp_path / "q.onnx"), *extra]
    if layout != "none":
        argv += ["--calibration", str(feeds)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("sonnx: error: quantize: ") and words in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "q.onnx").exists()


@pytest.mark.parametrize(
    ("files", "words"),
    [
        (["input_ids"], "has no file for input 'attention_mask'"),
        (["input_ids", "attention_mask", "labels"], "labels.npy' names no input"),
        ("loose", "put each feed in a sub-folder"),
    ],
)
def test_two_input_feed_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture, files: list[str] | str, words: str
) -> None:
    model, feeds = tiny_bert()
    onnx.save(model, tmp_path / "bert.onnx")
    folder = tmp_path / "feeds" / ("" if files == "loose" else "0")
    folder.mkdir(parents=True, exist_ok=True)
    for name in ["input_ids"] if files == "loose" else files:
        np.save(folder / f"{name}.npy", feeds[0].get(name, feeds[0]["input_ids"]))
    argv = ["quantize", str(tmp_path / "bert.onnx"), str(tmp_path / "q.onnx")]
    assert main([*argv, "--calibration", str(tmp_path / "feeds")]) == 2
    assert words in capsys.readouterr().err


def test_model_errors(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["quantize", str(tmp_path), str(tmp_path / "q.onnx"), "--weights-only"]) == 2
    assert "is a directory; give an .onnx file" in capsys.readouterr().err
    _matmul_model(tmp_path / "m.onnx")
    argv = ["quantize", str(tmp_path / "m.onnx"), str(tmp_path / "q.onnx"), "--weights-only"]
    assert main([*argv, "--block-size", "24"]) == 2
    assert "block_size must be one of 16, 32, 64, 128, 256" in capsys.readouterr().err
