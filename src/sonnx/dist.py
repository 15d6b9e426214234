"""Process-group helpers for data-parallel training on torch.distributed.

Launch with torchrun (``torchrun --nproc-per-node 2 script.py``, or across hosts with its
``--nnodes``/``--rdzv-endpoint`` options): it sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR`` and ``MASTER_PORT``, which :func:`init` reads. Without them everything runs as
a single process, so the same script works anywhere. The backend is gloo on the CPU and NCCL
when CUDA is available.

A group that :func:`init` opened is closed when the interpreter exits (SINGA's scripts never
call :func:`destroy`). Left for the interpreter's own teardown to destroy, with gloo's
threads still running, a rank that finished first died about one exit in four with "terminate
called without an active exception" (SIGABRT), which torchrun reports as the whole job failing.
"""

from __future__ import annotations

import atexit
import os
from datetime import timedelta
from typing import Any

import numpy as np
import torch
import torch.distributed as tdist

from sonnx.device import Device, create_cpu_device, create_cuda_gpu_on
from sonnx.errors import BadInputError, DistributedError

DEFAULT_TIMEOUT_SECONDS = 120.0

#: Whether the current default group is one :func:`init` opened (and so sonnx closes at exit).
_opened_here = False


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise BadInputError(
            f"environment variable {name} must be an integer, received {value!r}"
        ) from None


def is_initialized() -> bool:
    """Whether a torch.distributed process group is open.

    :returns: True inside a group (sonnx's or the program's own).
    """
    return tdist.is_available() and tdist.is_initialized()


def init(
    world_size: int | None = None,
    rank: int | None = None,
    backend: str | None = None,
    timeout: float = DEFAULT_TIMEOUT_SECONDS,
) -> tuple[int, int]:
    """Join the process group described by the arguments or torchrun's environment.

    Returns ``(rank, world_size)``; with a world size of 1 no group is created. ``timeout``
    bounds how long a collective waits for a peer before failing with an error. A group that
    is already open is joined as it is.

    :param world_size: the number of processes (None: ``WORLD_SIZE``, else 1).
    :param rank: this process's rank (None: ``RANK``, else 0).
    :param backend: the torch.distributed backend (None: ``nccl`` with CUDA, else ``gloo``).
    :param timeout: seconds a collective waits for a peer.
    :returns: ``(rank, world_size)``.
    :raises BadInputError: a rank outside ``[0, world_size)``, or ``MASTER_PORT`` unset for
        several processes.
    :raises DistributedError: this process could not join the group.
    """
    if is_initialized():
        return tdist.get_rank(), tdist.get_world_size()
    size = _env_int("WORLD_SIZE", 1) if world_size is None else int(world_size)
    me = _env_int("RANK", 0) if rank is None else int(rank)
    if size < 1 or not 0 <= me < size:
        raise BadInputError(
            f"dist.init: need 0 <= rank < world_size, received rank {me} and world_size {size}"
        )
    if size == 1:
        return 0, 1
    chosen = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if "MASTER_PORT" not in os.environ:
        raise BadInputError(
            "dist.init: MASTER_PORT is not set (launch with torchrun, or set "
            "MASTER_ADDR and MASTER_PORT for every process)"
        )
    try:
        tdist.init_process_group(
            chosen,
            init_method="env://",
            world_size=size,
            rank=me,
            timeout=timedelta(seconds=timeout),
        )
    except Exception as e:  # rendezvous failures come as several torch exception types
        raise DistributedError(
            f"dist.init: rank {me} of {size} could not join the process "
            f"group ({chosen} backend): {e}"
        ) from e
    global _opened_here
    _opened_here = True
    atexit.unregister(_destroy_at_exit)  # registered once however often a group is opened
    atexit.register(_destroy_at_exit)
    return me, size


def rank() -> int:
    """This process's rank.

    :returns: the group's rank, else ``RANK`` from the environment, else 0.
    """
    return tdist.get_rank() if is_initialized() else _env_int("RANK", 0)


def world_size() -> int:
    """The number of processes.

    :returns: the group's size, else ``WORLD_SIZE`` from the environment, else 1.
    """
    return tdist.get_world_size() if is_initialized() else _env_int("WORLD_SIZE", 1)


def local_rank() -> int:
    """This process's rank on its machine.

    :returns: ``LOCAL_RANK`` from the environment (torchrun sets it), else 0.
    """
    return _env_int("LOCAL_RANK", 0)


def is_main() -> bool:
    """True on the process that writes checkpoints and prints progress (rank 0).

    :returns: whether this is rank 0.
    """
    return rank() == 0


def device() -> Device:
    """This process's device: its own GPU (``LOCAL_RANK``) under NCCL, else the CPU.

    :returns: the device.
    :raises BadInputError: under NCCL, no GPU has this process's local rank.
    """
    if is_initialized() and tdist.get_backend() == "nccl":
        return create_cuda_gpu_on(local_rank())
    return create_cpu_device()


def barrier() -> None:
    """Wait until every process arrives (a no-op in a single process).

    :raises DistributedError: a peer process died or stopped responding.
    """
    if is_initialized():
        run_collective("barrier", tdist.barrier)


def shard(
    *arrays: np.ndarray, rank_: int | None = None, world: int | None = None
) -> tuple[np.ndarray, ...]:
    """Each process's own contiguous, equally long slice of the given arrays (same length).

    The last ``len % world`` items are dropped so every rank runs the same number of steps.

    :param arrays: the arrays to shard, all of one length.
    :param rank_: the rank whose slice to take (None: this process's).
    :param world: the number of slices (None: the world size).
    :returns: this rank's slice of each array, in order.
    :raises BadInputError: the arrays differ in length.
    """
    me = rank() if rank_ is None else rank_
    size = world_size() if world is None else world
    lengths = {len(a) for a in arrays}
    if len(lengths) != 1:
        raise BadInputError(f"dist.shard: arrays must have one length, received {lengths}")
    per = lengths.pop() // size
    return tuple(a[me * per : (me + 1) * per] for a in arrays)


def run_collective(what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Run a torch.distributed call, turning a dead or hung peer into a clear error."""
    try:
        return fn(*args, **kwargs)
    except (RuntimeError, tdist.DistBackendError) as e:
        raise DistributedError(
            f"rank {rank()} of {world_size()}: {what} failed; a peer process probably died "
            f"or stopped responding ({str(e).splitlines()[0] if str(e) else type(e).__name__})"
        ) from e


def destroy() -> None:
    """Leave the process group (at the end of a distributed script; without it, a group
    :func:`init` opened is left when the interpreter exits)."""
    global _opened_here
    _opened_here = False
    if is_initialized():
        tdist.destroy_process_group()


def _destroy_at_exit() -> None:
    """The ``atexit`` teardown :func:`init` registers: leave the group sonnx opened if it is
    still open (after :func:`destroy`, or with no group left, there is nothing to do)."""
    if _opened_here:
        destroy()
