"""docs/contrib-operators.md lists every com.microsoft operator, and says "yes" exactly for those
the registry holds."""

from __future__ import annotations

from pathlib import Path

import sonnx  # noqa: F401  (registers every converter)
from sonnx.onnx.registry import REGISTRY

TABLE = Path(__file__).resolve().parents[2] / "docs" / "contrib-operators.md"


def _rows() -> dict[str, str]:
    rows = {}
    for line in TABLE.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 4 and cells[0] not in ("operator", "---"):
            rows[cells[0]] = cells[1]
    return rows


def test_the_table_says_yes_for_exactly_the_registered_com_microsoft_operators() -> None:
    rows = _rows()
    supported = {op for op, cell in rows.items() if cell.startswith("yes")}
    registered = set(REGISTRY.op_types("com.microsoft"))
    assert supported - {"SimplifiedLayerNormalization (default domain)"} == registered
    assert "SimplifiedLayerNormalization" in REGISTRY.op_types("")
    assert len(rows) > 120  # every operator of onnxruntime's list, supported or not
