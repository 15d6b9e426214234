"""The ``sonnx`` command explains itself: version, help with defaults, a closed pipe, ``run``'s
values, names, cuts and casts, ``cache --clear``'s report, ``demo --limit``'s check."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import sonnx
from sonnx import cli
from sonnx.cli import build_parser, main
from sonnx.cli_run import output_paths

X = np.array([[-1.0, 0.5, 2.0, -3.0]], np.float32)


def _model(path: Path, size: int = 4) -> Path:
    """x -> Relu (node 'Relu_8', tensor 'relu:0') -> Mul by 2 (node 'Mul_9', tensor
    'scaled/out') -> Neg -> y."""
    nodes = [
        helper.make_node("Relu", ["x"], ["relu:0"], name="Relu_8"),
        helper.make_node("Mul", ["relu:0", "two"], ["scaled/out"], name="Mul_9"),
        helper.make_node("Neg", ["scaled/out"], ["y"], name="Neg_10"),
    ]
    graph = helper.make_graph(
        nodes,
        "small",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", size])],
        [numpy_helper.from_array(np.array(2.0, np.float32), "two")],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _npy(path: Path, array: np.ndarray) -> str:
    np.save(path, array)
    return str(path)


# ---- --version and --help ------------------------------------------------------------------
def test_version_prints_the_package_version(capsys) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"sonnx {sonnx.__version__}"


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(commands.choices)


def _option_help(help_text: str) -> dict[str, str]:
    """A rendered --help's entries by their first option string (or positional name), each
    with its wrapped lines joined."""
    entries: dict[str, str] = {}
    current = None
    for line in help_text.splitlines():
        stripped = line.strip()
        if line.startswith("  ") and not line.startswith("   ") and stripped:
            current = stripped.split()[0].rstrip(",")
            entries[current] = stripped
        elif current is not None and stripped:
            entries[current] += " " + stripped
        else:
            current = None
    return entries


@pytest.mark.parametrize("name", sorted(_subcommands()))
def test_every_option_has_help_that_states_its_default(name) -> None:
    command = _subcommands()[name]
    shown = _option_help(command.format_help())
    for action in command._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        key = action.option_strings[0] if action.option_strings else action.dest
        assert action.help, f"sonnx {name} {key} has no help"
        entry = " ".join(shown[key].split())
        default = action.default
        if not action.option_strings or action.required or default is False:
            continue  # positionals and required options have no default, flags are off
        if default is None or default == []:
            assert "default" in entry, f"sonnx {name} {key} does not say what its absence does"
        else:
            assert f"(default: {default})" in entry, f"sonnx {name} {key}: {entry}"


def test_serve_help_shows_port_host_and_request_limit(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for default in ("(default: 8000)", "(default: 127.0.0.1)", "(default: 64.0)"):
        assert default in out


def test_demo_limit_help_says_it_cuts_both_sets() -> None:
    entry = " ".join(_option_help(_subcommands()["demo"].format_help())["--limit"].split())
    assert "training set and of the test set" in entry


# ---- a closed pipe ---------------------------------------------------------------------------
def test_a_closed_pipe_ends_quietly(tmp_path) -> None:
    model = _model(tmp_path / "m.onnx")
    env = {**os.environ, "PYTHONPATH": str(Path(sonnx.__file__).parents[1])}
    process = subprocess.Popen(
        [sys.executable, "-m", "sonnx", "info", str(model)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    process.stdout.close()  # before sonnx has imported torch: its first write finds no reader
    _, err = process.communicate(timeout=120)
    assert b"Traceback" not in err and b"BrokenPipeError" not in err, err.decode()
    assert process.returncode == 1


# ---- info and run ------------------------------------------------------------------------------
def test_info_names_each_nodes_outputs_and_dtypes_in_onnx_words(tmp_path, capsys) -> None:
    assert main(["info", str(_model(tmp_path / "m.onnx"))]) == 0
    out = capsys.readouterr().out
    assert "inputs:  x: float32 (N, 4)" in out and "outputs: y: float32 (N, 4)" in out
    assert "torch." not in out
    rows = {line.split()[3]: line.split()[4] for line in out.splitlines() if "_" in line[:60]}
    assert rows == {"Relu_8": "relu:0", "Mul_9": "scaled/out", "Neg_10": "y"}


def test_run_prints_values_and_saves_by_output_name(tmp_path, capsys) -> None:
    model = _model(tmp_path / "m.onnx")
    x = _npy(tmp_path / "x.npy", X)
    prefix = str(tmp_path / "out")
    assert main(["run", str(model), x, "--save", prefix]) == 0
    out = capsys.readouterr().out
    assert "y: float32 (1, 4)" in out and "[[-0. -1. -4. -0.]]" in out
    np.testing.assert_array_equal(np.load(f"{prefix}_y.npy"), -2 * np.maximum(X, 0))


def test_run_summarises_large_outputs(tmp_path, capsys) -> None:
    model = _model(tmp_path / "m.onnx", size=3000)
    x = _npy(tmp_path / "x.npy", np.ones((1, 3000), np.float32))
    assert main(["run", str(model), x]) == 0
    assert "..." in capsys.readouterr().out
    assert main(["run", str(model), x, "--threshold", "5000"]) == 0
    assert "..." not in capsys.readouterr().out


def test_run_output_cuts_at_named_tensors(tmp_path, capsys) -> None:
    model = _model(tmp_path / "m.onnx")
    x = _npy(tmp_path / "x.npy", X)
    prefix = str(tmp_path / "cut")
    argv = ["run", str(model), x, "--output", "scaled/out", "--output", "relu:0", "--save", prefix]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.index("scaled/out: float32") < out.index("relu:0: float32")  # the asked order
    np.testing.assert_array_equal(np.load(f"{prefix}_relu_0.npy"), np.maximum(X, 0))
    np.testing.assert_array_equal(np.load(f"{prefix}_scaled_out.npy"), 2 * np.maximum(X, 0))
    assert main(["run", str(model), x, "--output", "Relu_8"]) == 2  # a node name, not a tensor
    assert "sonnx info MODEL" in capsys.readouterr().err


def test_run_last_layers_saves_the_cut_tensor_by_name(tmp_path, capsys) -> None:
    model = _model(tmp_path / "m.onnx")
    prefix = str(tmp_path / "cut")
    x = _npy(tmp_path / "x.npy", X)
    assert main(["run", str(model), x, "--last-layers", "-2", "--save", prefix]) == 0
    np.testing.assert_array_equal(np.load(f"{prefix}_scaled_out.npy"), 2 * np.maximum(X, 0))


def test_run_prints_a_sequence_output_and_says_it_is_not_saved(tmp_path, capsys) -> None:
    graph = helper.make_graph(
        [helper.make_node("SequenceConstruct", ["x", "x"], ["pair"])],
        "seq",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_sequence_value_info("pair", TensorProto.FLOAT, None)],
    )
    model = tmp_path / "seq.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    x = _npy(tmp_path / "x.npy", X)
    assert main(["run", str(model), x, "--save", str(tmp_path / "out")]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("pair: list\n[array([[-1. ,  0.5,  2. , -3. ]], dtype=float32)")
    assert "sonnx: note: pair is a list, not saved" in captured.err


def test_output_names_become_safe_distinct_file_names() -> None:
    paths = output_paths("p", ["a/b:0", "a_b_0", "logits", "../up"])
    expected = ["p_a_b_0_0.npy", "p_a_b_0_1.npy", "p_logits.npy", "p_.._up.npy"]
    assert [str(p) for p in paths] == expected


def test_run_refuses_float64_naming_the_cast_and_casts_with_a_note(tmp_path, capsys) -> None:
    model = _model(tmp_path / "m.onnx")
    x = _npy(tmp_path / "x.npy", X.astype(np.float64))
    assert main(["run", str(model), x]) == 2
    err = capsys.readouterr().err
    assert "expects float32 (N, 4), received float64; pass --cast" in err
    assert "x.astype(np.float32)" in err and "torch." not in err
    assert main(["run", str(model), x, "--cast"]) == 0
    captured = capsys.readouterr()
    assert f"sonnx: note: {x}: cast float64 to float32 for input 'x'" in captured.err
    assert "[[-0. -1. -4. -0.]]" in captured.out


# ---- cache and demo ----------------------------------------------------------------------------
def test_cache_clear_says_what_it_removed(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("SONNX_CACHE_DIR", str(tmp_path))
    (tmp_path / "graphs" / "d" / "e").mkdir(parents=True)
    (tmp_path / "graphs" / "d" / "e" / "graph.so").write_bytes(b"\0" * 2048)
    (tmp_path / "plans").mkdir()
    (tmp_path / "plans" / "p.json").write_bytes(b"{}")
    assert main(["cache", "--clear"]) == 0
    out = capsys.readouterr().out
    assert f"removed 2 files (2,050 bytes) from {tmp_path}" in out
    assert f"{tmp_path}: 0 compiled graphs" in out
    assert not (tmp_path / "graphs").exists()


def test_demo_limit_below_one_batch_is_a_clear_error(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(cli, "tune_process_for_serving", lambda: None)  # process-wide settings
    argv = ["demo", "--limit", "10", "--out", str(tmp_path), "--no-progress"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "limit 10 keeps fewer images than one batch (64)" in err
    assert "both the training and the test set" in err
    assert list(tmp_path.iterdir()) == []  # nothing was trained or written


# ---- one-line errors (issue 47 items 14-17, 19) -------------------------------------------------
def _one_line_error(argv: list[str], capsys) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_run_names_a_missing_or_non_npy_input_in_one_line(tmp_path, capsys) -> None:
    model = str(_model(tmp_path / "m.onnx"))
    err = _one_line_error(["run", model, str(tmp_path / "missing.npy")], capsys)
    assert "run: input file" in err and "missing.npy not found" in err
    (tmp_path / "x.txt").write_text("-1 0.5 2 -3")
    err = _one_line_error(["run", model, str(tmp_path / "x.txt")], capsys)
    assert "x.txt is not a .npy file (NumPy's format, written by np.save)" in err
    assert "pickled" not in err
    np.savez(tmp_path / "x.npz", x=X)
    assert "received an .npz archive" in _one_line_error(
        ["run", model, f"{tmp_path}/x.npz"], capsys
    )
    cut = tmp_path / "cut.npy"
    cut.write_bytes(Path(_npy(tmp_path / "x.npy", X)).read_bytes()[:100])
    assert "cannot be read as a .npy file" in _one_line_error(["run", model, str(cut)], capsys)
    assert "is a directory, expected a .npy file" in _one_line_error(
        ["run", model, str(tmp_path)], capsys
    )


def test_info_on_a_directory_says_so_and_opens_a_genai_directory(tmp_path, capsys) -> None:
    err = _one_line_error(["info", str(tmp_path)], capsys)
    assert f"{tmp_path} is a directory, expected an .onnx file or a model directory" in err
    _model(tmp_path / "decoder.onnx")
    config = {"model": {"decoder": {"filename": "decoder.onnx"}}}
    (tmp_path / "genai_config.json").write_text(json.dumps(config))
    assert main(["info", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"model:   {tmp_path / 'decoder.onnx'}\n") and "Relu_8" in out


def test_a_truncated_model_says_truncated(tmp_path, capsys) -> None:
    path = _model(tmp_path / "m.onnx")
    path.write_bytes(path.read_bytes()[:40])
    err = _one_line_error(["info", str(path)], capsys)
    assert "runs past the end of the file (40 bytes): truncated?" in err


def test_info_shows_long_names_whole_and_keeps_columns_aligned(tmp_path, capsys) -> None:
    long = "encoder/layer_norm/" + "very_long_scope/" * 4 + "Relu_8"
    path = _model(tmp_path / "m.onnx")
    model = onnx.load(path)
    model.graph.node[0].name = long
    onnx.save(model, path)
    assert main(["info", str(path)]) == 0
    header, *rows = capsys.readouterr().out.split("\n\n", 1)[1].splitlines()
    assert long in rows[0]
    column = header.index("outputs")
    assert [row[column:].split()[0] for row in rows] == ["relu:0", "scaled/out", "y"]
    assert header.index("shape") == rows[0].index("(N, 4)")
