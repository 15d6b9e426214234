"""The exceptions sonnx raises for user-facing problems.

Every message names the thing that is wrong (node, input, dtype, shape, file) and what was
expected, ending in what was received.
"""

from __future__ import annotations


class SonnxError(Exception):
    """Base class of every error sonnx raises on purpose.

    ``node`` names the graph node that raised it (``'name' (Op-version)``) once the importer
    has added it to the message; None for errors outside a node.
    """

    node: str | None = None


class BadInputError(SonnxError, ValueError):
    """A value given to sonnx (tensor, shape, dtype, device, hyper-parameter) is not acceptable."""


class BadModelError(SonnxError, ValueError):
    """An ONNX model, or a file given as one, is malformed or inconsistent."""


class ResourceLimitError(BadModelError):
    """A model asks for more than a limit allows: a tensor larger than
    ``SONNX_MAX_TENSOR_BYTES`` (by default half the memory of its device; raised before
    anything is allocated), or more Loop iterations than ``SONNX_MAX_LOOP_ITERATIONS``."""


class UnsupportedOperatorError(SonnxError, NotImplementedError):
    """One or more ONNX operators have no converter (import) or no export at the requested opset."""


class ExportError(SonnxError, ValueError):
    """A recorded graph cannot be written as ONNX."""


class OpsetTooOldError(ExportError):
    """An operator, or one of its attributes, cannot be written at the export opset.

    ``needed`` is the first opset that can write it; the exporter raises its default target to
    that opset, while an opset the user asked for stays an error.
    """

    def __init__(self, message: str, needed: int) -> None:
        super().__init__(message)
        self.needed = needed


class DistributedError(SonnxError, RuntimeError):
    """Distributed training failed: a peer died, timed out, or the group is misconfigured."""
