"""The layer table's columns fit their widest cell (issue 47 item 19)."""

from __future__ import annotations

import pytest

from sonnx.runtime.layer_table import text_table


def test_columns_fit_the_widest_cell_and_numbers_align_right() -> None:
    long = "a/very/long/scope/name/that/is/longer/than/thirty/two/characters"
    text = text_table(("#", "name", "shape"), [("9", long, "(1, 2)"), ("10", "b", "?")], right=1)
    assert text.splitlines() == [
        " #  name" + " " * (len(long) - 4) + "  shape",
        f" 9  {long}  (1, 2)",
        "10  b" + " " * (len(long) - 1) + "  ?",
    ]


def test_a_row_of_another_width_is_refused() -> None:
    with pytest.raises(ValueError, match=r"every row needs 2 cells, received 1"):
        text_table(("a", "b"), [("x",)])
