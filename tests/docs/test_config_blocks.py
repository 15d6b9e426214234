"""Every ```yaml and ```json block of README.md and docs/**/*.md parses, so a reader who copies
one gets a file its tool reads. (A model's ``config.json`` for ``sonnx serve`` is written by a
shell block; ``tests/docs/test_shell_blocks.py`` loads it with sonnx.serve's own loader.)"""

from __future__ import annotations

import json

import pytest
import yaml

from tests.docs.pages import PAGES, Fence, page_fences

PARSERS = {"yaml": lambda text: list(yaml.safe_load_all(text)), "json": json.loads}
BLOCKS = [f for page in PAGES for f in page_fences(page) if f.lang in PARSERS]


@pytest.mark.parametrize("fence", BLOCKS, ids=lambda f: f"{f.where}:{f.line}")
def test_block_parses(fence: Fence) -> None:
    assert PARSERS[fence.lang](fence.code) not in (None, [], [None])
