"""Where the documentation puts things a user looks for (issue 47, items 20-22).

The API reference documents what ``import sonnx`` gives under the names a user imports
(``::: sonnx.prepare`` renders the alias, with ``sonnx.prepare`` as its anchor); the docs
extra installs the formatter that breaks long signatures over lines; getting started is for
users, maintainers' set-up lives on the contributing page.
"""

from __future__ import annotations

import inspect
import re

import yaml

import sonnx
from tests.docs.pages import ROOT
from tests.docs.requirements import pyproject
from tests.docs.test_api_docstrings import BLOCK

# mkdocstrings-python breaks a signature with the first of these it can import.
SIGNATURE_FORMATTERS = {"ruff", "black"}


def test_sonnx_page_renders_every_public_function_and_class_under_its_sonnx_name() -> None:
    blocks = {path for path, _ in BLOCK.findall((ROOT / "docs/reference/sonnx.md").read_text())}
    public = {
        f"sonnx.{name}"
        for name in sonnx.__all__
        if inspect.isfunction(getattr(sonnx, name)) or inspect.isclass(getattr(sonnx, name))
    }
    assert public - blocks == set()
    assert {"sonnx.prepare", "sonnx.SingaRep", "sonnx.to_onnx", "sonnx.save"} <= public


def test_the_docs_extra_installs_a_signature_formatter_and_sets_a_line_length() -> None:
    docs = pyproject()["project"]["optional-dependencies"]["docs"]
    names = {re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0] for requirement in docs}
    assert names & SIGNATURE_FORMATTERS, f"the docs extra {docs} has no formatter"
    # The constraints pin it, so scripts/test.sh's docs build formats with a known version.
    pinned = (ROOT / "constraints.txt").read_text()
    assert all(f"\n{name}==" in pinned for name in names & SIGNATURE_FORMATTERS)
    config = (ROOT / "mkdocs.yml").read_text()
    options = yaml.load(config, Loader=yaml.BaseLoader)["plugins"][1]["mkdocstrings"]
    assert int(options["handlers"]["python"]["options"]["line_length"]) <= 100


def test_getting_started_is_for_users() -> None:
    text = (ROOT / "docs/getting-started.md").read_text()
    for maintainers in ("these machines", "refresh-constraints", "scripts/test.sh"):
        assert maintainers not in text
        assert maintainers in (ROOT / "docs/contributing.md").read_text()
