"""The sequence and optional operators called directly, compared with onnxruntime running the
same nodes; a position out of range names the node and the range."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from onnx import helper

from sonnx.engine.values import OptionalValue, TensorSequence
from sonnx.errors import BadInputError
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
    SplitToSequence,
)
from sonnx.tensor import Tensor
from tests.operators.control.helpers import FLOAT, INT64, ort_run

X = np.arange(24, dtype=np.float32).reshape(2, 4, 3)


def t(a) -> Tensor:
    return Tensor(data=np.asarray(a), requires_grad=False)


def test_a_chain_of_sequence_operators_matches_onnxruntime() -> None:
    """Split into pieces of sizes [1, 3], insert X's second row at the front, erase the last,
    read one back, count them and join them along a new axis."""
    seq = SplitToSequence(axis=1)(t(X), t(np.array([1, 3])))
    row = t(X[:, 1:2])
    seq = SequenceInsert()(seq, row, t(np.array(0)))
    seq = SequenceErase()(seq, t(np.array(-1)))
    at = SequenceAt()(seq, t(np.array(1)))
    length = SequenceLength()(seq)
    joined = ConcatFromSequence(axis=1, new_axis=1)(seq)
    nodes = [
        helper.make_node("SplitToSequence", ["x", "sizes"], ["s1"], axis=1),
        helper.make_node("Slice", ["x", "one", "two", "one"], ["row"]),
        helper.make_node("SequenceInsert", ["s1", "row", "zero"], ["s2"]),
        helper.make_node("SequenceErase", ["s2", "last"], ["s3"]),
        helper.make_node("SequenceAt", ["s3", "one"], ["at"]),
        helper.make_node("SequenceLength", ["s3"], ["length"]),
        helper.make_node("ConcatFromSequence", ["s3"], ["joined"], axis=1, new_axis=1),
    ]
    feeds = {
        "x": X,
        "sizes": np.array([1, 3]),
        "zero": np.array(0),
        "one": np.array([1]),
        "two": np.array([2]),
        "last": np.array(-1),
    }
    want = ort_run(nodes, feeds, [("at", FLOAT), ("length", INT64), ("joined", FLOAT)])
    for got, expected in zip((at, length, joined), want, strict=True):
        np.testing.assert_array_equal(got.numpy(), expected)
    assert length.dtype == torch.int64


def test_split_into_ones_squeezes_unless_keepdims() -> None:
    kept = SplitToSequence(axis=2)(t(X))
    squeezed = SplitToSequence(axis=2, keepdims=0)(t(X))
    assert [p.shape for p in kept] == [(2, 4, 1)] * 3
    assert [p.shape for p in squeezed] == [(2, 4)] * 3


def test_construct_and_empty_keep_their_element_type() -> None:
    built = SequenceConstruct()(t(X), t(X))
    assert isinstance(built, TensorSequence) and built.dtype == torch.float32 and len(built) == 2
    empty = SequenceEmpty(dtype=7)()  # INT64
    assert len(empty) == 0 and empty.dtype == torch.int64
    assert SequenceLength()(empty).numpy() == 0


def test_optionals_hold_test_and_open() -> None:
    held = Optional()(t(X))
    nothing = Optional()()
    assert isinstance(held, OptionalValue)
    assert OptionalHasElement()(held).numpy() and not OptionalHasElement()(nothing).numpy()
    np.testing.assert_array_equal(OptionalGetElement()(held).numpy(), X)
    opener = OptionalGetElement()
    opener.name = "unwrap"
    with pytest.raises(BadInputError, match=r"^OptionalGetElement 'unwrap': the optional is empty"):
        opener(nothing)


@pytest.mark.parametrize(
    ("op", "position", "expected"),
    [
        (SequenceAt, 2, r"^SequenceAt 'pick': position must be in \[-2, 1\] for a sequence of "
         r"length 2, received 2$"),
        (SequenceErase, -3, r"^SequenceErase 'pick': position must be in \[-2, 1\]"),
        (SequenceInsert, 3, r"^SequenceInsert 'pick': position must be in \[-2, 2\]"),
    ],
)  # fmt: skip
def test_a_position_out_of_range_names_the_node_and_the_range(op, position, expected) -> None:
    node = op()
    node.name = "pick"
    seq = TensorSequence([t(X), t(X)])
    args = [seq, t(X), t(np.array(position))] if op is SequenceInsert else [seq, t(position)]
    with pytest.raises(BadInputError, match=expected):
        node(*args)
