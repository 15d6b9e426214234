"""Mixed-precision training: the ``precision`` a :class:`~sonnx.model.Model` compiles with.

``"fp32"`` (the default) trains in float32. ``"bf16"`` and ``"fp16"`` run each training step's
forward and loss under ``torch.autocast`` on the model's device: matrix products and
convolutions in the lower precision, the operations autocast lists as precision-sensitive
(softmax, normalizations, reductions, losses) in float32, and the parameters, their gradients
and the optimizer state stay float32 ("master weights"). Backward runs outside autocast, in the
dtypes the forward chose (torch's advice).

bfloat16 has float32's exponent range, so gradients cannot underflow and no loss scaling is
needed; float16 has five exponent bits, so ``"fp16"`` also scales the loss
(:class:`sonnx.opt.loss_scaler.LossScaler`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext

import torch

from sonnx.device import Device
from sonnx.errors import BadInputError

__all__ = [
    "PRECISIONS",
    "autocast",
    "autocast_mixes",
    "check_precision",
    "outside_autocast",
]

#: each precision's autocast dtype (None: no autocast).
PRECISIONS: dict[str, torch.dtype | None] = {
    "fp32": None,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
}


def check_precision(precision: object, where: str) -> str:
    """``precision`` if it names one of :data:`PRECISIONS`, else a :class:`BadInputError`."""
    if not isinstance(precision, str) or precision not in PRECISIONS:
        raise BadInputError(
            f"{where}: precision must be one of {list(PRECISIONS)}, received {precision!r}"
        )
    return precision


def autocast(precision: str, device: Device) -> AbstractContextManager[object]:
    """The context a training step of ``precision`` runs in on ``device``."""
    dtype = PRECISIONS[precision]
    if dtype is None:
        return nullcontext()
    return torch.autocast(device.torch_device.type, dtype=dtype)


@contextmanager
def outside_autocast() -> Iterator[None]:
    """Suspend any autocast region that is active (backward runs in the forward's dtypes)."""
    with ExitStack() as stack:
        for device_type in ("cpu", "cuda"):
            if torch.is_autocast_enabled(device_type):
                stack.enter_context(torch.autocast(device_type, enabled=False))
        yield


def autocast_mixes(*xs: torch.Tensor) -> bool:
    """Whether float tensors of differing dtypes are autocast's doing (it is active on their
    device), so that an operator's "one element type" check should let them through: autocast
    casts them to the dtype it computes in."""
    return all(x.is_floating_point() for x in xs) and torch.is_autocast_enabled(xs[0].device.type)
