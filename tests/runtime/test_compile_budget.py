"""The compile budget's accounting and how it describes itself."""

from __future__ import annotations

import pytest

from sonnx.errors import BadInputError
from sonnx.runtime.compile_budget import CompileBudget


def test_a_budget_is_spent_by_the_seconds_counted() -> None:
    budget = CompileBudget(2)
    budget.spent = 1.5
    assert not budget.exhausted
    with budget.counting():
        budget.spent += 1.0  # stands for a compile's seconds, counted on top
    assert budget.exhausted
    assert budget.describe().startswith("the compile budget of 2 s is spent (")


def test_no_budget_is_never_spent_and_still_describes_itself() -> None:
    # explain() describes the budget whether or not one was set; with none it raised
    # TypeError formatting None.
    budget = CompileBudget(None)
    budget.spent = 12.4
    assert not budget.exhausted
    assert budget.describe() == "no compile budget (12 s compiling)"


@pytest.mark.parametrize("seconds", [0, -1, True, "60"])
def test_a_budget_must_be_positive_seconds(seconds: object) -> None:
    with pytest.raises(BadInputError, match=f"compile_budget .*received {seconds!r}"):
        CompileBudget(seconds)  # type: ignore[arg-type]
