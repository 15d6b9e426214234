"""sonnx.device: a device name torch cannot parse is a typed error naming what is accepted."""

from __future__ import annotations

import pytest

from sonnx.device import Device, as_device
from sonnx.errors import BadInputError


@pytest.mark.parametrize("name", ["tpu", "cuda:x", ""])
def test_a_name_that_is_no_device_is_a_bad_input_naming_the_accepted_ones(name: str) -> None:
    with pytest.raises(BadInputError, match=rf"expected 'cpu', 'cuda' or 'cuda:N'.*{name!r}"):
        as_device(name)


def test_a_device_name_keeps_its_ordinal() -> None:
    assert Device("cpu").torch_device.type == "cpu"
    assert Device("cuda:1").id() == 1
