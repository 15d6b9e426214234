"""String tensors: construction, the layout operators on strings (run on positions), Shape and
Size, Equal, clear errors for operators that take no strings, and export to onnxruntime."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch

import sonnx
from sonnx import autograd as ag
from sonnx import dtypes
from sonnx.errors import BadInputError
from sonnx.strings import StringArray, as_string_array
from sonnx.tensor import StringTensor, Tensor, to_numpy

WORDS = np.array([["héllo", "b", "c"], ["d", "", "f"]], dtype=object)


def words() -> Tensor:
    return Tensor(data=WORDS, requires_grad=False, name="words")


def test_string_arrays_of_every_numpy_spelling_make_string_tensors():
    for data in (WORDS, WORDS.astype(str), np.char.encode(WORDS.astype(str), "utf-8")):
        t = Tensor(data=data)
        assert type(t) is StringTensor and t.dtype is dtypes.STRING
        assert t.shape == (2, 3) and not t.requires_grad
        np.testing.assert_array_equal(to_numpy(t), WORDS)
        assert to_numpy(t).dtype == object
    assert type(Tensor(shape=(2,), dtype="string")) is StringTensor


def test_strings_stay_on_the_host_and_refuse_gradients_and_numeric_types():
    t = words()
    assert t.device.torch_device.type == "cpu"
    with pytest.raises(BadInputError, match="no gradient"):
        t.data.requires_grad_(True)
    with pytest.raises(BadInputError, match=r"cannot be converted to float32"):
        t.data.to(torch.float32)
    with pytest.raises(BadInputError, match=r"expected strings, received an element of type"):
        Tensor(data=np.array(["a", 3], dtype=object))


def test_as_string_array_refuses_numbers():
    with pytest.raises(BadInputError, match="expected strings, received an array of int64"):
        as_string_array(np.arange(3))


@pytest.mark.parametrize(
    ("build", "expected"),
    [
        (lambda t: ag.reshape(t, [3, 2]), WORDS.reshape(3, 2)),
        (lambda t: ag.transpose(t, [1, 0]), WORDS.T),
        (lambda t: ag.gather(t, 1, np.array([1, 1, 0])), WORDS[:, [1, 1, 0]]),
        (lambda t: ag.concat([t, t], axis=0), np.concatenate([WORDS, WORDS])),
        (lambda t: ag.slice(t, [0], [2], [1], [2]), WORDS[:, 0:2:2]),
        (lambda t: ag.expand(ag.reshape(t, [1, 6]), [2, 6]), np.tile(WORDS.reshape(1, 6), (2, 1))),
        (lambda t: ag.tile(t, np.array([1, 2])), np.tile(WORDS, (1, 2))),
        (lambda t: ag.unsqueeze(t, [0]), WORDS[None]),
        (lambda t: ag.identity(t), WORDS),
    ],
)
def test_layout_operators_move_strings(build, expected):
    out = build(words())
    assert type(out) is StringTensor
    np.testing.assert_array_equal(to_numpy(out), expected)


def test_where_and_split_pick_strings_from_several_inputs():
    other = Tensor(data=np.full((2, 3), "x", dtype=object))
    condition = Tensor(data=np.array([[True, False, True], [False, True, False]]))
    out = ag.where(words(), other, condition)  # SINGA's order: x, y, condition
    np.testing.assert_array_equal(to_numpy(out), np.where(condition.numpy(), WORDS, "x"))
    first, second = ag.split(words(), axis=1, parts=[1, 2])
    np.testing.assert_array_equal(to_numpy(first), WORDS[:, :1])
    np.testing.assert_array_equal(to_numpy(second), WORDS[:, 1:])


def test_shape_size_and_equal_read_strings():
    np.testing.assert_array_equal(ag.shape(words()).numpy(), [2, 3])
    assert ag.size(words()).numpy() == 6
    other = Tensor(data=np.array(["d", "b", "z"], dtype=object))
    np.testing.assert_array_equal(ag.equal(words(), other).numpy(), other.numpy() == WORDS)


def test_an_operator_that_takes_no_strings_says_so():
    with pytest.raises(BadInputError, match=r"Add: input\(s\) \[0, 1\] are strings"):
        ag.add(words(), words())
    with pytest.raises(BadInputError, match="Equal: input 1 must be strings like the others"):
        ag.equal(words(), Tensor(data=np.ones((2, 3), np.float32)))


def test_string_array_indexing_with_positions():
    table = StringArray(np.array(["a", "b", "c"], dtype=object))
    picked = table[torch.tensor([[2, 0], [1, 1]])]
    assert picked.shape == (2, 2)
    np.testing.assert_array_equal(picked.array, [["c", "a"], ["b", "b"]])


def test_a_string_model_built_with_sonnx_exports_and_runs_in_onnxruntime():
    x = words()
    reference = Tensor(data=np.array(["b"], dtype=object), requires_grad=False)
    matches = ag.equal(ag.reshape(x, [6]), reference)
    picked = ag.gather(x, 1, np.array([2, 0]))
    model = sonnx.to_onnx([x], [matches, picked])
    assert model.opset_import[0].version >= 19  # Equal takes strings from opset 19
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    fresh = np.array([["b", "q", "b"], ["z", "b", "y"]], dtype=object)
    got_matches, got_picked = session.run(None, {session.get_inputs()[0].name: fresh})
    np.testing.assert_array_equal(got_matches, fresh.reshape(6) == "b")
    np.testing.assert_array_equal(got_picked, fresh[:, [2, 0]])
