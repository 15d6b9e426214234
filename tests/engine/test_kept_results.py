"""A kept result holds while its inputs are the same tensors, unchanged."""

from __future__ import annotations

import torch

from sonnx.engine.kept_results import KeptResult
from sonnx.tensor import Tensor


def test_holds_for_the_same_unchanged_inputs() -> None:
    weight, scale = torch.ones(3), torch.full((1,), 2.0)
    kept = KeptResult((weight, scale, None), "result")
    assert kept.result == "result"
    assert kept.holds_for((weight, scale, None))


def test_an_in_place_change_or_another_tensor_ends_it() -> None:
    weight = torch.ones(3)
    kept = KeptResult((weight,), 1)
    assert not kept.holds_for((torch.ones(3),)), "an equal but different tensor"
    weight.add_(1)
    assert not kept.holds_for((weight,)), "the same tensor changed in place"
    assert not kept.holds_for((weight, None)), "another number of inputs"


def test_a_sonnx_tensor_counts_by_its_torch_data() -> None:
    weight = Tensor(data=torch.ones(2))
    kept = KeptResult([weight, 3], "r")
    assert kept.holds_for([weight, 3])
    weight.data = torch.ones(2)  # what load_states does
    assert not kept.holds_for([weight, 3])


def test_other_objects_count_by_identity() -> None:
    axes = [0, 1]
    kept = KeptResult([axes], "r")
    assert kept.holds_for([axes])
    assert not kept.holds_for([[0, 1]])
