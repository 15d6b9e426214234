"""Devices: a thin, SINGA-named layer over :class:`torch.device`.

All code paths are device-agnostic: a :class:`Device` only carries the torch device and the
random generator seed; every tensor operation runs wherever its torch data lives.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch

from sonnx.errors import BadInputError
from sonnx.run_state import RUN_DEVICE


class Device:
    """Where tensors live and computation runs (CPU or one CUDA GPU).

    :param torch_device: a torch device or its name (``"cpu"``, ``"cuda:0"``; a bare
        ``"cuda"`` means the current GPU).
    :raises BadInputError: the name is not a device torch knows (``"tpu"``), or is malformed.
    """

    def __init__(self, torch_device: torch.device | str) -> None:
        try:
            dev = torch.device(torch_device)
        except RuntimeError as e:
            raise BadInputError(
                "device: expected 'cpu', 'cuda' or 'cuda:N' (N a GPU ordinal), received "
                f"{torch_device!r}"
            ) from e
        if dev.type == "cuda" and dev.index is None:
            # torch puts a tensor sent to "cuda" on "cuda:N" (the current GPU), and the two
            # compare unequal: a bare "cuda" is resolved here, so a model prepared on it
            # accepts its own tensors.
            current = torch.cuda.current_device() if torch.cuda.is_available() else 0
            dev = torch.device("cuda", current)
        self.torch_device = dev

    @property
    def lang(self) -> str:
        """``"cpp"`` for the CPU and ``"cuda"`` for a GPU, as SINGA named them."""
        return "cuda" if self.torch_device.type == "cuda" else "cpp"

    def id(self) -> int:
        """The GPU ordinal, or -1 for the CPU (SINGA's convention).

        :returns: the ordinal.
        """
        return -1 if self.torch_device.type == "cpu" else (self.torch_device.index or 0)

    def is_cuda(self) -> bool:
        """Whether this is a CUDA GPU.

        :returns: True for a GPU, False for the CPU.
        """
        return self.torch_device.type == "cuda"

    def SetRandSeed(self, seed: int) -> None:
        """Seed every random generator that can affect this device (SINGA's spelling).

        :param seed: the seed.
        """
        set_seed(seed)

    def set_rand_seed(self, seed: int) -> None:
        """Seed every random generator that can affect this device (see :func:`set_seed`).

        :param seed: the seed.
        """
        set_seed(seed)

    def synchronize(self) -> None:
        """Wait for queued GPU work; a no-op on the CPU."""
        if self.is_cuda():
            torch.cuda.synchronize(self.torch_device)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Device) and other.torch_device == self.torch_device

    def __hash__(self) -> int:
        return hash(self.torch_device)

    def __repr__(self) -> str:
        return f"Device({str(self.torch_device)!r})"


_cpu = Device("cpu")
_default: Device = _cpu


def create_cpu_device() -> Device:
    """The host CPU device.

    :returns: the one CPU device.
    """
    return _cpu


def require_cuda(device_id: int, subject: str, advice: str) -> None:
    """Raise unless torch sees CUDA GPU ``device_id``; each caller words what asked for it.

    :param device_id: the GPU's ordinal, from 0.
    :param subject: what asked for the GPU, as the message's opening (``"generate: --device
        cuda:1"``).
    :param advice: what to do instead where there is no CUDA (``"use --device cpu"``).
    :raises BadInputError: CUDA is not available, or no GPU has that ordinal.
    """
    if not torch.cuda.is_available():
        raise BadInputError(
            f"{subject} needs CUDA, and torch.cuda.is_available() is False "
            f"(no GPU, or a CPU-only torch); {advice}"
        )
    count = torch.cuda.device_count()
    if not 0 <= device_id < count:
        raise BadInputError(
            f"{subject}: this machine has {count} CUDA GPU(s), cuda:0 to cuda:{count - 1}"
        )


def create_cuda_gpu() -> Device:
    """The first CUDA GPU; a clear error where there is none.

    :returns: GPU 0.
    :raises BadInputError: CUDA is not available.
    """
    return create_cuda_gpu_on(0)


def create_cuda_gpu_on(device_id: int) -> Device:
    """CUDA GPU number ``device_id``.

    :param device_id: the GPU's ordinal, from 0.
    :returns: that GPU.
    :raises BadInputError: CUDA is not available, or no GPU has that ordinal.
    """
    require_cuda(device_id, f"device: cuda:{device_id}", "use device.create_cpu_device()")
    return Device(torch.device("cuda", device_id))


def get_default_device() -> Device:
    """The device used when none is given: inside a graph run in this thread, the graph's
    (:func:`default_device_for_run`); else the CPU unless changed by set_default_device.

    :returns: the default device.
    """
    run_device = RUN_DEVICE.get()
    return _default if run_device is None else run_device


def set_default_device(dev: Device) -> None:
    """Make ``dev`` the default device of the process (every thread's).

    :param dev: a Device, a torch device or a device name.
    :raises BadInputError: ``dev`` is none of these.
    """
    global _default
    _default = as_device(dev)


@contextmanager
def default_device_for_run(dev: Device) -> Iterator[None]:
    """Make ``dev`` the default device of this thread for a while (a graph's run), leaving
    the process's default and other threads' runs alone."""
    token = RUN_DEVICE.set(dev)
    try:
        yield
    finally:
        RUN_DEVICE.reset(token)


def as_device(dev: Device | torch.device | str | None) -> Device:
    """Normalise ``None`` (default device), a torch device or a string into a :class:`Device`."""
    if dev is None:
        return get_default_device()
    if isinstance(dev, Device):
        return dev
    if isinstance(dev, (torch.device, str)):
        return Device(dev)
    raise BadInputError(f"expected a sonnx Device, torch.device or str, received {type(dev)}")


def set_seed(seed: int) -> None:
    """Seed Python, NumPy and torch (CPU and every GPU) for reproducible runs.

    :param seed: the seed (NumPy gets it modulo 2**32).
    """
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)
