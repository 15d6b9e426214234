"""Refusing tensors too large to allocate, before anything is allocated.

Some operators size their output from tensor *values* read at run time (ConstantOfShape,
Expand, Tile, Range, Pad, Resize, OneHot, random draws with a ``shape`` attribute), and a model
file declares its initializers' dims in a few bytes. A malformed or hostile model can thus ask
for terabytes; without a check the process is killed by the kernel, or swaps for minutes,
instead of failing with an error naming the node. Those operators call :func:`check_shape`
with the shape they are about to create.

The limit is ``SONNX_MAX_TENSOR_BYTES`` (bytes, read on every check so tests and servers may
change it), by default half of the physical memory of the host, or of the GPU for tensors
bound for CUDA.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from functools import cache

import torch

from sonnx.errors import BadInputError, ResourceLimitError
from sonnx.symbolic_sizes import has_symbols

ENV_VAR = "SONNX_MAX_TENSOR_BYTES"


@cache
def _host_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not POSIX: assume a modest 8 GiB
        return 8 << 30


@cache
def _gpu_memory(index: int) -> int:
    return torch.cuda.get_device_properties(index).total_memory


def max_tensor_bytes(device: torch.device | None = None) -> int:
    """The largest tensor, in bytes, sonnx may allocate on ``device`` (None: the host)."""
    given = os.environ.get(ENV_VAR, "").strip()
    if given:
        try:
            limit = int(float(given))
        except ValueError:
            raise BadInputError(
                f"environment variable {ENV_VAR} must be a number of bytes, received {given!r}"
            ) from None
        if limit <= 0:
            raise BadInputError(
                f"environment variable {ENV_VAR} must be positive, received {given!r}"
            )
        return limit
    if device is not None and device.type == "cuda":
        return _gpu_memory(device.index or 0) // 2
    return _host_memory() // 2


def check_elements(
    what: str, count: int, itemsize: int, device: torch.device | None = None, shape: str = ""
) -> None:
    """Raise :class:`ResourceLimitError` if ``count`` elements of ``itemsize`` bytes each
    exceed the limit of ``device``; ``what`` names the tensor (``"ConstantOfShape: output"``)."""
    if has_symbols([count]):  # a trace with symbolic sizes: no one size to check
        return
    needed = count * max(itemsize, 1)
    limit = max_tensor_bytes(device)
    if needed > limit:
        where = "host" if device is None or device.type == "cpu" else str(device)
        raise ResourceLimitError(
            f"{what} would need {_format_bytes(needed)} on the {where}, more than the limit of "
            f"{_format_bytes(limit)} (set {ENV_VAR} to raise it); received shape {shape}"
        )


def check_shape(
    what: str, shape: Sequence[int], dtype: torch.dtype, device: torch.device | None = None
) -> None:
    """Refuse to create a tensor of ``shape`` and ``dtype`` on ``device`` if it is too large.

    Negative dims are reported as such rather than multiplied into a negative size.
    """
    if has_symbols(shape):  # a trace with symbolic sizes: reading them would pin them
        return
    dims = [int(d) for d in shape]
    if any(d < 0 for d in dims):
        raise BadInputError(f"{what}: expected non-negative dims, received shape {tuple(dims)}")
    itemsize = dtype.itemsize if dtype is not None else 1
    check_elements(what, math.prod(dims), itemsize, device, str(tuple(dims)))


def _format_bytes(n: int) -> str:
    size, unit = float(n), "B"
    for bigger in ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if size < 1024:
            break
        size, unit = size / 1024, bigger
    return f"{n} B" if unit == "B" else f"{size:.1f} {unit}"
