"""Importer registrations for the sequence and optional operators (ONNX ``seq(tensor)`` and
``optional(...)`` values; operators in :mod:`sonnx.operators.control`)."""

from __future__ import annotations

from sonnx.onnx.registry import register_operators
from sonnx.operators.control import (
    ConcatFromSequence,
    Optional,
    OptionalGetElement,
    OptionalHasElement,
    SequenceAt,
    SequenceConstruct,
    SequenceEmpty,
    SequenceErase,
    SequenceInsert,
    SequenceLength,
    SequenceMap,
    SplitToSequence,
)

register_operators(
    SequenceConstruct, SequenceEmpty, SequenceInsert, SequenceAt, SequenceErase, SequenceLength,
    ConcatFromSequence, SplitToSequence, SequenceMap, Optional, OptionalHasElement,
    OptionalGetElement,
)  # fmt: skip
