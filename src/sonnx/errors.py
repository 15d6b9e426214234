"""The exceptions sonnx raises for user-facing problems.

Every message names the thing that is wrong (node, input, dtype, shape, file) and what was
expected, ending in what was received.
"""

from __future__ import annotations


class SonnxError(Exception):
    """Base class of every error sonnx raises on purpose: ``except SonnxError`` catches every
    typed error below (and the server's and LoRA's, which derive from them).

    ``node`` names the graph node that raised it (``'name' (Op-version)``) once the importer
    has added it to the message; None for errors outside a node.
    """

    node: str | None = None


class BadInputError(SonnxError, ValueError):
    """A value given to sonnx (tensor, shape, dtype, device, hyper-parameter) is not acceptable.

    Raised when the call is made: ``SingaRep.run`` for a missing, unknown or mistyped input, a
    layer, optimizer or schedule for an argument out of range, ``Model.load_states`` for a
    file that does not fit; a ``ValueError``, so code catching that keeps working.
    """


class WrongTypeError(BadInputError, TypeError):
    """A value given to sonnx is of the wrong Python type (a layer that is not a ``Layer``).

    A :class:`BadInputError` that is also a ``TypeError``, so code catching either keeps
    working; the message names the type that was received.
    """


class BadModelError(SonnxError, ValueError):
    """An ONNX model, or a file given as one, is malformed or inconsistent.

    Raised by :func:`sonnx.prepare` (and ``SONNXModel``) before anything runs: a missing or
    unparsable file, a node that breaks its schema, a graph that references unknown values.
    """


class ResourceLimitError(BadModelError):
    """A model asks for more than a limit allows: a tensor larger than
    ``SONNX_MAX_TENSOR_BYTES`` (by default half the memory of its device; raised before
    anything is allocated), or more Loop iterations than ``SONNX_MAX_LOOP_ITERATIONS``.

    Raised while a model runs (``SingaRep.run``), naming the node.
    """


class UnsupportedOperatorError(SonnxError, NotImplementedError):
    """One or more ONNX operators have no converter (import) or no export at the requested opset.

    Raised by :func:`sonnx.prepare` listing every unsupported node at once, or when a node
    uses an attribute or mode sonnx does not implement (named in the message); a
    ``NotImplementedError``.
    """


class ExportError(SonnxError, ValueError):
    """A recorded graph cannot be written as ONNX.

    Raised by :func:`sonnx.to_onnx` and ``Model.to_onnx``: bad names, ``dynamic_axes`` or
    ``dtype``, a leaf that is neither an input nor a parameter, or an operator that cannot be
    written with the attributes it was given.
    """


class OpsetTooOldError(ExportError):
    """An operator, or one of its attributes, cannot be written at the export opset.

    ``needed`` is the first opset that can write it; the exporter raises its default target to
    that opset, while an opset the user asked for stays an error.

    :param message: what cannot be written, naming the node and the opset asked for.
    :param needed: the first opset that can write it (kept as ``needed``).
    """

    def __init__(self, message: str, needed: int) -> None:
        super().__init__(message)
        self.needed = needed


class DistributedError(SonnxError, RuntimeError):
    """Distributed training failed: a peer died, timed out, or the group is misconfigured.

    Raised by ``DistOpt`` (joining the group, or a collective in any update mode) and
    ``sonnx.dist``; a ``RuntimeError``.
    """


class GraphModeWarning(RuntimeWarning):
    """Graph mode runs part of a model eagerly instead of compiled, with the same results.

    Warned once per cause by ``prepare(..., use_graph=True)`` runs: a step whose results
    depend on its input values, a segment inductor could not compile, a compiled graph whose
    first run (or first run at other input sizes) differed from the eager steps or that raised
    while running, or a spent compile budget; the message names the steps and why, and the
    warning the line of the caller's code that ran the model. A ``RuntimeWarning``.
    """
