"""The main job (``sonnx demo``) end to end on a small slice of the default data."""

from __future__ import annotations

import onnx

from sonnx.cli import main
from sonnx.walkthrough import run_walkthrough


def test_walkthrough_stages_agree_with_onnxruntime_and_each_other(tmp_path) -> None:
    results = run_walkthrough(tmp_path, limit=640, progress=False)
    by_stage = {r.name.split()[0]: r for r in results}
    assert [r.name.split()[0] for r in results] == ["1", "2", "3", "4", "5", "6"]
    assert by_stage["2"].note.startswith("onnxruntime disagrees on 0 of")
    assert by_stage["6"].note.startswith("onnxruntime disagrees on 0 of")
    assert round(by_stage["3"].accuracy, 4) == round(by_stage["2"].accuracy, 4)
    assert by_stage["5"].accuracy == by_stage["6"].accuracy
    for name in ("mnist.onnx", "transfer.onnx"):
        onnx.checker.check_model(onnx.load(tmp_path / name), full_check=True)
    assert (tmp_path / "curves.png").stat().st_size > 10_000


def test_cli_info_describes_an_exported_model(tmp_path, capsys) -> None:
    run_walkthrough(tmp_path, limit=128, progress=False)
    assert main(["info", str(tmp_path / "mnist.onnx")]) == 0
    out = capsys.readouterr().out
    assert "Conv" in out and "Gemm" in out and "parameters: 8 tensors" in out


def test_cli_reports_a_bad_model_file_cleanly(tmp_path, capsys) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00not a model")
    assert main(["info", str(bad)]) == 2
    assert "sonnx: error:" in capsys.readouterr().err
