"""The text table of a prepared model's layers (:meth:`SingaRep.summary`, ``sonnx info``).

Each column is as wide as its widest cell, so a long node or tensor name is shown whole and
the columns after it stay aligned; the last column (the shape) is not padded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import onnx

from sonnx.runtime.input_specs import declared_dims

#: The header of :meth:`SingaRep.summary`'s table.
LAYER_COLUMNS = ("#", "cut", "op", "name", "outputs", "shape")


def text_table(header: Sequence[str], rows: Sequence[Sequence[str]], right: int = 0) -> str:
    """``header`` and ``rows`` as aligned text, one line each, columns two spaces apart.

    :param header: the column titles.
    :param rows: the cells of each row, as many as ``header`` has.
    :param right: how many leading columns are right-aligned (numbers).
    :returns: the table, without a trailing newline.
    :raises ValueError: a row has another number of cells than ``header``.
    """
    for row in rows:
        if len(row) != len(header):
            raise ValueError(
                f"text_table: every row needs {len(header)} cells, received {len(row)}: {row!r}"
            )
    widths = [max(len(str(c)) for c in column) for column in zip(header, *rows, strict=True)]

    def line(cells: Sequence[str]) -> str:
        padded = [
            str(c).rjust(w) if i < right else str(c).ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(padded).rstrip()

    return "\n".join(line(cells) for cells in [header, *rows])


def inferred_shapes(model: onnx.ModelProto) -> dict[str, str]:
    """Output shapes by tensor name from ONNX shape inference, for the table's shape column.

    :param model: the model.
    :returns: ``"(2, ?, 8)"``-style shapes by tensor name; none where inference fails (the
        shapes are only a display aid).
    """
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # shape inference is only a display aid here
        return {}
    shapes = {}
    for v in [*inferred.graph.value_info, *inferred.graph.output]:
        dims = declared_dims(v) if v.type.WhichOneof("value") == "tensor_type" else None
        if dims is not None:
            shapes[v.name] = "(" + ", ".join("?" if d is None else str(d) for d in dims) + ")"
    return shapes


def layer_table(steps: Sequence[Any], shapes: Mapping[str, str]) -> str:
    """The table of :meth:`SingaRep.summary`: per step its index, the ``last_layers`` value
    that stops after it, op, node name, output names and first output's shape (``?`` where
    shape inference knows none).

    :param steps: the program's steps, in order.
    :param shapes: inferred shapes by tensor name.
    :returns: the table, one line per step after a header line.
    """
    n, rows = len(steps), []
    for k, step in enumerate(steps):
        outputs = [o for o in step.outputs if o]
        shape = shapes.get(outputs[0], "?") if outputs else ""
        cells = (step.info.op_type, step.info.name, ", ".join(outputs), str(shape))
        rows.append((str(k), str(k - n), *cells))
    return text_table(LAYER_COLUMNS, rows, right=2)
