"""The documentation pages and their fenced code blocks, as the docs tests read them.

A fence opens with three backticks and a language (```` ```python ````, ```` ```bash ````,
```` ```text ````) and closes with three backticks alone, as CommonMark reads it: a bare
opening fence is a mistake (it turns the prose up to the next fence into code, and a
```` ```python ```` line inside it into text). A block the tests would run (python or shell)
that cannot run here says why on its fence line, ```` ```bash {data-skip="installs packages"} ````:
an attribute the docs site (pymdownx.superfences with attr_list) and GitHub both render as a
plain code block, where anything else after the language breaks the site's page (superfences
then reads the fence as text, and the page's following headings with it). A skip without its
reason is an error, as is anything else after the language.

The pages' code runs in a directory holding what the pages assume (:func:`lay_out`):
``model.onnx``, the README quick start's small CNN (input ``input``, float32
``(batch, 1, 28, 28)``; output ``logits``, ``(batch, 10)``), and ``tiny-llm/``, a random-weight
llama onnxruntime-genai's model builder wrote (``tests.genai_builds``).
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])

PYTHON = frozenset({"python"})
SHELL = frozenset({"bash", "sh", "shell", "console"})
#: The languages whose blocks the tests run, so whose fence may say why one does not.
RUNNABLE = PYTHON | SHELL

OPENING = re.compile(r"^```(?P<lang>[\w+-]*)(?P<rest>.*)$")
SKIP = re.compile(r'^\{data-skip="(?P<reason>[^"]{6,})"\}$')


@dataclass(frozen=True)
class Fence:
    """One fenced block: ``line`` and ``end`` are its opening and closing fences' lines
    (1-based), ``code`` the lines between them, ``annotation`` what the opening fence line
    holds after the language."""

    where: str
    line: int
    end: int
    lang: str
    annotation: str
    code: str

    @property
    def skip_reason(self) -> str | None:
        found = SKIP.match(self.annotation)
        return found["reason"] if found else None

    def problem(self) -> str | None:
        """What is wrong with the fence line, if anything."""
        if not self.lang:
            return "a fence names its language (text for plain text)"
        if self.annotation and (self.lang not in RUNNABLE or self.skip_reason is None):
            allowed = 'nothing or {data-skip="<reason>"}' if self.lang in RUNNABLE else "nothing"
            return f"a {self.lang} fence takes {allowed} after the language"
        return None


def fences(text: str, where: str) -> list[Fence]:
    """Every fenced block of a page's text, in order; ``where`` names the page in messages."""
    found = []
    lines = text.split("\n")
    start = None
    for number, line in enumerate(lines, 1):
        if start is None and line.startswith("```"):
            start = number
        elif start is not None and line.rstrip() == "```":
            opening = OPENING.match(lines[start - 1])
            lang, rest = (opening["lang"], opening["rest"].strip()) if opening else ("", "")
            code = "\n".join(lines[start : number - 1]) + "\n"
            found.append(Fence(where, start, number, lang, rest, code))
            start = None
    return found


def command_lines(fence: Fence) -> list[str]:
    """The block's command lines: continuation lines joined, comments and blank lines left out;
    in a console block only the ``$ `` lines (the rest is what they print)."""
    lines = fence.code.replace("\\\n", " ").splitlines()
    if fence.lang == "console":
        lines = [line[2:] for line in lines if line.startswith("$ ")]
    return [line for line in lines if line.strip() and not line.lstrip().startswith("#")]


def page_fences(page: Path) -> list[Fence]:
    return fences(page.read_text(encoding="utf-8"), name(page))


def name(page: Path) -> str:
    return str(page.relative_to(ROOT))


def lay_out(directory: Path, model_onnx: bytes, tiny_llm: Path) -> None:
    """Put the files the pages assume into ``directory``."""
    (directory / "model.onnx").write_bytes(model_onnx)
    shutil.copytree(tiny_llm, directory / "tiny-llm")


def environment(directory: Path) -> dict[str, str]:
    """The environment a page's code runs in: this checkout's sonnx first on the path, and a
    graph store of its own."""
    env = {**os.environ, "SONNX_CACHE_DIR": str(directory / "cache")}
    src = str(ROOT / "src")
    env["PYTHONPATH"] = os.pathsep.join([src, env["PYTHONPATH"]]) if env.get("PYTHONPATH") else src
    return env
