"""Every ```python block of README.md and docs/**/*.md runs, so the documentation cannot drift
from the code.

A page's blocks run in order in one namespace (a block may use what an earlier block of the same
page defined, as a reader following the page would), in a process of their own and a fresh
working directory holding the files the pages assume: ``model.onnx``, the small CNN the
README's quick start writes (input ``input``, float32 ``(batch, 1, 28, 28)``; output
``logits``, ``(batch, 10)``); and ``tiny-llm/``, a random-weight llama onnxruntime-genai's
model builder wrote (``tests.genai_builds``). A block that
cannot run here says why on its fence line, ```` ```python skip: needs a GPU ````; a bare
``skip`` is an error.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from sonnx import layer, model, tensor

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
FENCE = re.compile(r"^```python(?P<rest>[^\n]*)\n(?P<code>.*?)^```\s*$", re.MULTILINE | re.DOTALL)
SKIP = re.compile(r"^\s*skip:\s*(?P<reason>\S.*)$")


@dataclass(frozen=True)
class Block:
    line: int
    code: str
    skip_reason: str | None


def blocks(page: Path) -> list[Block]:
    """The page's python blocks; a fence line with anything but ``skip: <reason>`` fails."""
    text = page.read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        rest = match["rest"].strip()
        skip = SKIP.match(rest)
        if rest and skip is None:
            raise AssertionError(
                f"{page.relative_to(ROOT)}:{line}: a python fence takes nothing or "
                f"'skip: <reason>', received {rest!r}"
            )
        found.append(Block(line, match["code"], skip["reason"] if skip else None))
    return found


class _SmallCNN(model.Model):
    """The README quick start's network, for pages that start from a ``model.onnx``."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = layer.Conv2d(8, 3, padding=1)
        self.relu = layer.ReLU()
        self.pool = layer.MaxPool2d(2, 2)
        self.flatten = layer.Flatten()
        self.fc = layer.Linear(10)

    def forward(self, x: tensor.Tensor) -> tensor.Tensor:
        return self.fc(self.flatten(self.pool(self.relu(self.conv(x)))))


@pytest.fixture(scope="module")
def model_onnx(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    net = _SmallCNN()
    x = tensor.from_numpy(np.zeros((2, 1, 28, 28), np.float32))
    net.compile([x], is_train=False)
    path = tmp_path_factory.mktemp("fixture") / "model.onnx"
    net.to_onnx(path, [x], input_names=["input"], output_names=["logits"])
    return path.read_bytes()


@pytest.fixture(scope="module")
def tiny_llm() -> Path:
    from tests.genai_builds import build

    return build("llama", "fp32")


PAGES_WITH_CODE = [p for p in PAGES if blocks(p)]


def test_every_skipped_block_says_why() -> None:
    for page in PAGES:
        for block in blocks(page):  # raises on a fence line without a reason
            assert block.skip_reason is None or len(block.skip_reason) > 5, (page, block.line)


# Runs one page's blocks in order in one namespace; a failing block is named by page and line.
DRIVER = """
import json, sys
namespace = {"__name__": "__main__"}
for where, code in json.load(open(sys.argv[1])):
    exec(compile(code, where, "exec"), namespace)
"""


@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=lambda p: str(p.relative_to(ROOT)))
def test_page_code_runs(page: Path, tmp_path: Path, model_onnx: bytes, tiny_llm: Path) -> None:
    """Each page in a process of its own, so what one page registers or sets (an operator, an
    environment variable, the training flag) never reaches another page or test."""
    (tmp_path / "model.onnx").write_bytes(model_onnx)
    shutil.copytree(tiny_llm, tmp_path / "tiny-llm")
    code = [
        # Blank lines put each block at its own line of the page in tracebacks.
        (str(page.relative_to(ROOT)), "\n" * block.line + block.code)
        for block in blocks(page)
        if block.skip_reason is None
    ]
    (tmp_path / "blocks.json").write_text(json.dumps(code))
    env = {**os.environ, "SONNX_CACHE_DIR": str(tmp_path / "cache")}
    src = str(ROOT / "src")
    env["PYTHONPATH"] = os.pathsep.join([src, env["PYTHONPATH"]]) if env.get("PYTHONPATH") else src
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, "blocks.json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"{page.relative_to(ROOT)}: a block failed\n{done.stderr[-4000:]}"
