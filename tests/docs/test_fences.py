"""Every fence of README.md and docs/**/*.md names its language, and a block that the tests
would run but cannot says why (:mod:`tests.docs.pages`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs.pages import PAGES, fences, name, page_fences


@pytest.mark.parametrize("page", PAGES, ids=name)
def test_fence_lines_name_a_language_and_a_skip_its_reason(page: Path) -> None:
    problems = [f"{f.where}:{f.line}: {f.problem()}" for f in page_fences(page) if f.problem()]
    assert problems == []


def test_fence_problems_are_found() -> None:
    """The checker itself, on a made-up page: a bare opening fence, a skip in a form the site
    does not render, a skip without its reason, an annotation on a block no test runs; a good
    skip passes."""
    text = "\n".join(
        [
            "```",
            "text",
            "```",
            "```python skip: needs a GPU",
            "x",
            "```",
            '```bash {data-skip=""}',
            "x",
            "```",
            '```yaml {data-skip="not run anyway"}',
            "a: 1",
            "```",
            '```bash {data-skip="installs packages"}',
            "pip install .",
            "```",
        ]
    )
    problems = [(f.line, f.problem()) for f in fences(text, "fake.md")]
    assert problems == [
        (1, "a fence names its language (text for plain text)"),
        (4, 'a python fence takes nothing or {data-skip="<reason>"} after the language'),
        (7, 'a bash fence takes nothing or {data-skip="<reason>"} after the language'),
        (10, "a yaml fence takes nothing after the language"),
        (13, None),
    ]
