"""Every ```python block of README.md and docs/**/*.md runs, so the documentation cannot drift
from the code.

A page's blocks run in order in one namespace (a block may use what an earlier block of the same
page defined, as a reader following the page would), in a process of their own and a fresh
working directory holding the files the pages assume (:mod:`tests.docs.pages`: ``model.onnx``
and ``tiny-llm/``). A block that cannot run here says why on its fence line,
```` ```python {data-skip="needs a GPU"} ````; ``tests/docs/test_fences.py`` holds every fence
line to that form.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.pages import PAGES, PYTHON, environment, lay_out, name, page_fences


def python_blocks(page: Path) -> list[tuple[str, str]]:
    """The page's python blocks that run, as (page, code) with blank lines in front, so that
    each block sits at its own line of the page in tracebacks."""
    return [
        (fence.where, "\n" * fence.line + fence.code)
        for fence in page_fences(page)
        if fence.lang in PYTHON and fence.skip_reason is None
    ]


PAGES_WITH_CODE = [p for p in PAGES if python_blocks(p)]

# Runs one page's blocks in order in one namespace; a failing block is named by page and line.
DRIVER = """
import json, sys
namespace = {"__name__": "__main__"}
for where, code in json.load(open(sys.argv[1])):
    exec(compile(code, where, "exec"), namespace)
"""


@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=name)
def test_page_code_runs(page: Path, tmp_path: Path, model_onnx: bytes, tiny_llm: Path) -> None:
    """Each page in a process of its own, so what one page registers or sets (an operator, an
    environment variable, the training flag) never reaches another page or test."""
    lay_out(tmp_path, model_onnx, tiny_llm)
    (tmp_path / "blocks.json").write_text(json.dumps(python_blocks(page)))
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, "blocks.json"],
        cwd=tmp_path,
        env=environment(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"{name(page)}: a block failed\n{done.stderr[-4000:]}"
