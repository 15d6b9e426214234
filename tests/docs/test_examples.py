"""examples/layer_api_mnist.py, the layer-API example the training guide points to, runs as its
docstring says (on a small slice of the default data)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_layer_api_example_trains_and_reports_an_accuracy(tmp_path: Path) -> None:
    src = str(ROOT / "src")
    path = os.environ.get("PYTHONPATH")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, path]) if path else src}
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "layer_api_mnist.py"), "--limit", "128"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = re.search(r"test accuracy (\d\.\d+) after 1 epoch", done.stdout)
    assert found is not None, done.stdout
    assert 0.0 <= float(found[1]) <= 1.0
