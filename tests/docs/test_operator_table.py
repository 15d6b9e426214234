"""The operator page is written from the registry when the docs are built (scripts/operator_table.py
is a hook of mkdocs.yml), so it cannot fall behind a new operator, version or exclusion."""

from __future__ import annotations

from pathlib import Path

from mkdocs.config import load_config
from mkdocs.structure.files import Files
from scripts.operator_table import PAGE, render

from sonnx.onnx.registry import REGISTRY

ROOT = Path(__file__).resolve().parents[2]


def test_the_build_adds_the_operator_page_rendered_from_the_registry() -> None:
    config = load_config(str(ROOT / "mkdocs.yml"))
    assert not (ROOT / "docs" / PAGE).exists(), "the page is generated, not checked in"
    # The files event as the build runs it: every plugin and hook mkdocs.yml names.
    page = config.plugins.on_files(Files([]), config=config).get_file_from_path(PAGE)
    assert page is not None and page.content_string == render()


def test_the_page_holds_every_registered_operator_at_its_versions() -> None:
    text = render()
    for op in ("Relu", "Conv", "If"):
        versions = ", ".join(str(v) for v in REGISTRY.versions(op))
        assert f"| {op} | {versions} |" in text
    assert "## com.microsoft" in text and "| GroupQueryAttention | 1 |" in text
