"""The examples the training guide points to run as their docstrings say (on a small slice of the
default data): examples/layer_api_mnist.py (the layer API) and examples/transfer_learning.py
(an imported image classifier, a frozen backbone, an export)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(tmp_path: Path, example: str, *args: str) -> subprocess.CompletedProcess[str]:
    src = str(ROOT / "src")
    path = os.environ.get("PYTHONPATH")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, path]) if path else src}
    return subprocess.run(
        [sys.executable, str(ROOT / "examples" / example), *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_layer_api_example_trains_and_reports_an_accuracy(tmp_path: Path) -> None:
    done = _run(tmp_path, "layer_api_mnist.py", "--limit", "128")
    assert done.returncode == 0, done.stderr[-3000:]
    found = re.search(r"test accuracy (\d\.\d+) after 1 epoch", done.stdout)
    assert found is not None, done.stdout
    assert 0.0 <= float(found[1]) <= 1.0


def test_transfer_learning_example_keeps_the_backbone_and_exports(tmp_path: Path) -> None:
    done = _run(tmp_path, "transfer_learning.py", "--limit", "1000", "--steps", "20")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "8 backbone parameters frozen, 4 running statistics unchanged" in done.stdout
    found = re.search(r"test accuracy (\d\.\d+)", done.stdout)
    assert found is not None, done.stdout
    assert 0.0 <= float(found[1]) <= 1.0
    assert (tmp_path / "transfer.onnx").is_file()
    found = re.search(r"onnxruntime agrees within (\S+)", done.stdout)
    assert found is not None and float(found[1]) < 1e-4, done.stdout
