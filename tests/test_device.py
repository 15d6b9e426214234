"""sonnx.device: a device name torch cannot parse, or a GPU torch does not see, is a typed error
naming what is accepted."""

from __future__ import annotations

import pytest
import torch

from sonnx.device import Device, as_device, create_cuda_gpu_on, require_cuda
from sonnx.errors import BadInputError


@pytest.mark.parametrize("name", ["tpu", "cuda:x", ""])
def test_a_name_that_is_no_device_is_a_bad_input_naming_the_accepted_ones(name: str) -> None:
    with pytest.raises(BadInputError, match=rf"expected 'cpu', 'cuda' or 'cuda:N'.*{name!r}"):
        as_device(name)


def test_a_device_name_keeps_its_ordinal() -> None:
    assert Device("cpu").torch_device.type == "cpu"
    assert Device("cuda:1").id() == 1


def test_a_gpu_without_cuda_is_refused_in_the_callers_words(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    expected = (
        "generate: --device cuda needs CUDA, and torch.cuda.is_available() is False (no GPU, or "
        "a CPU-only torch); use --device cpu"
    )
    with pytest.raises(BadInputError) as raised:
        require_cuda(0, "generate: --device cuda", "use --device cpu")
    assert str(raised.value) == expected
    with pytest.raises(BadInputError, match=r"^device: cuda:0 needs CUDA.*create_cpu_device"):
        create_cuda_gpu_on(0)


@pytest.mark.parametrize("ordinal", [-1, 2])
def test_a_gpu_ordinal_out_of_range_names_the_gpus_there_are(monkeypatch, ordinal: int) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(BadInputError) as raised:
        create_cuda_gpu_on(ordinal)
    expected = f"device: cuda:{ordinal}: this machine has 2 CUDA GPU(s), cuda:0 to cuda:1"
    assert str(raised.value) == expected
