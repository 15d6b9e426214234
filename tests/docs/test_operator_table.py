"""docs/operators.md is what scripts/operator_table.py writes from the registry now: a new
operator, version or conformance exclusion without regenerating the page fails here."""

from __future__ import annotations

from scripts.operator_table import PAGE, render


def test_the_operator_page_is_generated_from_the_registry() -> None:
    assert PAGE.read_text(encoding="utf-8") == render(), (
        "docs/operators.md is out of date: run python scripts/operator_table.py"
    )
