"""``Layer``: lazily-shaped building blocks that find their parameters by attribute.

A layer creates its parameters on its first call, from the input's shape, dtype and device
(``initialize(x)`` then ``forward(x)``), so ``Linear(10)`` needs no input size. Parameters and
states are discovered by walking the layer's attributes: sub-layers (also inside lists and
tuples) are visited recursively and named ``<attribute>.<name>`` (``conv1.W``); leaf tensors
(no creator) are states, and those with ``stores_grad`` are also parameters. Attributes whose
names start with ``_`` are private and not visited.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from sonnx import dtypes
from sonnx.errors import BadInputError, WrongTypeError
from sonnx.precision import autocast_mixes
from sonnx.tensor import Tensor

__all__ = ["Layer", "Sequential"]


class Layer:
    """Base class of every layer (and of :class:`sonnx.model.Model`).

    Subclasses implement ``forward`` and, when they own parameters, ``initialize`` with the
    same arguments; ``__call__`` runs ``initialize`` once before the first ``forward``.
    """

    sep = "."
    _initialized = False

    def __init__(self) -> None:
        self.training = True

    # ---- the part a subclass writes -------------------------------------------------------
    def initialize(self, *inputs: Any) -> None:
        """Create parameters from the first inputs' shapes (nothing to create by default).

        ``layer(*inputs)`` calls it once, before the first :meth:`forward`, with the same
        arguments; a subclass that owns parameters assigns them to attributes here.

        :param inputs: the first call's arguments.
        """

    def forward(self, *inputs: Any) -> Any:
        """The layer's computation; ``layer(*inputs)`` calls it after :meth:`initialize`.

        :returns: the output(s).
        """
        raise NotImplementedError(f"{type(self).__name__} does not define forward()")

    def __call__(self, *inputs: Any, **kwargs: Any) -> Any:
        if not self._initialized:
            self.initialize(*inputs, **kwargs)
            self._initialized = True
        return self.forward(*inputs, **kwargs)

    # ---- discovery ------------------------------------------------------------------------
    def _children(self) -> Iterator[tuple[str, Layer | Tensor]]:
        """``(name, sub-layer or tensor)`` for each public attribute holding one."""
        for name, value in vars(self).items():
            if name.startswith("_"):
                continue
            if isinstance(value, (Layer, Tensor)):
                yield name, value
            elif isinstance(value, (list, tuple)):
                for i, item in enumerate(value):
                    if isinstance(item, Layer):
                        yield f"{name}{self.sep}{i}", item

    def _walk(self, prefix: str, seen: set[int]) -> Iterator[tuple[str, Tensor]]:
        for name, value in self._children():
            if id(value) in seen:
                continue
            seen.add(id(value))
            full = prefix + name
            if isinstance(value, Layer):
                yield from value._walk(full + self.sep, seen)
            elif value.creator is None:
                yield full, value

    def named_states(self) -> Iterator[tuple[str, Tensor]]:
        """Every state tensor with its dotted name; unnamed tensors take that name.

        :returns: ``(name, tensor)`` pairs, parameters and buffers alike, each tensor once.
        """
        for name, t in self._walk("", set()):
            if t.name is None:
                t.name = name
            yield name, t

    def layers(self) -> Iterator[Layer]:
        """This layer and every sub-layer, depth first, each once.

        :returns: the layers, this one first.
        """
        stack: list[Layer] = [self]
        seen = {id(self)}
        while stack:
            layer = stack.pop()
            yield layer
            children = [v for _, v in layer._children() if isinstance(v, Layer)]
            for child in reversed(children):
                if id(child) not in seen:
                    seen.add(id(child))
                    stack.append(child)

    def get_params(self) -> dict[str, Tensor]:
        """The trainable parameters (``stores_grad``) by dotted name, e.g. ``{"fc.W": …}``.

        :returns: the parameters by name (empty before the first forward pass creates them).
        """
        return {name: t for name, t in self.named_states() if t.stores_grad}

    def get_states(self) -> dict[str, Tensor]:
        """The parameters plus the other states (e.g. batch-norm running statistics).

        :returns: every state by dotted name.
        """
        return dict(self.named_states())

    def set_params(self, params: Mapping[str, Any]) -> None:
        """Overwrite parameters in place from ``{name: Tensor | ndarray | torch.Tensor}``.

        :param params: new values by the names :meth:`get_params` uses (some or all of them).
        :raises BadInputError: an unknown name, a value that is not a tensor or array, or a
            value of another shape.
        """
        self._assign(params, self.get_params(), "set_params")

    def set_states(self, states: Mapping[str, Any]) -> None:
        """Overwrite parameters and states in place (see :meth:`get_states`).

        :param states: new values by the names :meth:`get_states` uses (some or all of them).
        :raises BadInputError: an unknown name, a value that is not a tensor or array, or a
            value of another shape.
        """
        self._assign(states, self.get_states(), "set_states")

    def _assign(self, values: Mapping[str, Any], targets: dict[str, Tensor], what: str) -> None:
        owner = f"{type(self).__name__}.{what}"
        unknown = sorted(set(values) - set(targets))
        if unknown:
            hint = "" if targets else " (the layer has none yet: run one forward pass first)"
            raise BadInputError(
                f"{owner}: unknown name(s) {unknown}; expected some of {sorted(targets)}{hint}"
            )
        for name, value in values.items():
            target = targets[name]
            data = _torch_data(value, owner, name)
            if tuple(data.shape) != target.shape:
                raise BadInputError(
                    f"{owner}: {name} must have shape {target.shape}, received {tuple(data.shape)}"
                )
            with torch.no_grad():
                target.data.copy_(data)

    # ---- modes ----------------------------------------------------------------------------
    def train(self, mode: bool = True) -> Layer:
        """Training mode (dropout active, batch statistics) for every layer; sets
        ``sonnx.autograd.training``, which the operators read, for this thread (a thread that
        runs the model has its own flag: see :mod:`sonnx.run_state`).

        :param mode: True for training mode, False for inference mode.
        :returns: this layer.
        """
        import sonnx.autograd as autograd

        autograd.training = bool(mode)
        for layer in self.layers():
            layer.training = bool(mode)
        return self

    def eval(self) -> Layer:
        """Inference mode: ``train(False)``.

        :returns: this layer.
        """
        return self.train(False)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class Sequential(Layer):
    """Applies its layers in order; their states are named by position (``0.W``, ``1.b``).

    :param layers: the layers, first to last.
    :raises WrongTypeError: an argument is not a Layer.
    """

    def __init__(self, *layers: Layer) -> None:
        super().__init__()
        for i, layer in enumerate(layers):
            _check_layer(layer, f"Sequential: argument {i}")
        self._layers = list(layers)

    def _children(self) -> Iterator[tuple[str, Layer | Tensor]]:
        for i, layer in enumerate(self._layers):
            yield str(i), layer

    def append(self, layer: Layer) -> None:
        """Add a layer after the last one.

        :param layer: the layer to run last.
        :raises WrongTypeError: ``layer`` is not a Layer.
        """
        _check_layer(layer, "Sequential.append")
        self._layers.append(layer)

    def __len__(self) -> int:
        return len(self._layers)

    def __getitem__(self, index: int) -> Layer:
        return self._layers[index]

    def forward(self, x: Any) -> Any:
        """Run the layers in order, each on the previous one's output.

        :param x: the first layer's input.
        :returns: the last layer's output (``x`` itself when there are no layers).
        """
        for layer in self._layers:
            x = layer(x)
        return x

    def __repr__(self) -> str:
        inner = ", ".join(repr(layer) for layer in self._layers)
        return f"Sequential({inner})"


def _check_layer(layer: Any, where: str) -> None:
    if not isinstance(layer, Layer):
        raise WrongTypeError(f"{where} must be a Layer, received {type(layer).__name__}")


# ---- helpers shared by the layer families ---------------------------------------------------


def check_input(
    layer: Layer, x: Any, ranks: Sequence[int], layout: str, like: Tensor | None = None
) -> None:
    """``x`` must be a Tensor of one of ``ranks`` (and match ``like``'s dtype and device;
    under autocast any float dtype is accepted, as autocast chooses the one computed in)."""
    name = type(layer).__name__
    if not isinstance(x, Tensor):
        raise BadInputError(f"{name}: input must be a sonnx Tensor, received {type(x).__name__}")
    if x.data.dim() not in ranks:
        if len(ranks) > 3:
            wanted = f"at least {min(ranks)}-D"
        else:
            wanted = " or ".join(f"{r}-D" for r in ranks)
        raise BadInputError(
            f"{name}: input must be {wanted} {layout}, received shape {tuple(x.data.shape)}"
        )
    if like is not None:
        if x.data.dtype != like.data.dtype and not autocast_mixes(x.data, like.data):
            raise BadInputError(
                f"{name}: input dtype must match the parameters' "
                f"{dtypes.dtype_name(like.data.dtype)}, received {dtypes.dtype_name(x.data.dtype)}"
            )
        if x.data.device != like.data.device:
            raise BadInputError(
                f"{name}: input must be on the parameters' device {like.data.device}, "
                f"received a tensor on {x.data.device}"
            )


def new_state(
    shape: Sequence[int], like: Tensor, fill: float = 0.0, trainable: bool = True
) -> Tensor:
    """A leaf tensor on ``like``'s device in ``like``'s float dtype (float32 otherwise)."""
    dtype = like.data.dtype if dtypes.is_float(like.data.dtype) else torch.float32
    t = Tensor(
        shape=tuple(shape),
        device=like.device,
        dtype=dtype,
        requires_grad=trainable,
        stores_grad=trainable,
    )
    return t.set_value(fill) if fill else t


def gaussian_param(shape: Sequence[int], like: Tensor, fan: int) -> Tensor:
    """A parameter drawn from N(0, 2 / fan) — SINGA's initialisation for Linear and Conv."""
    return new_state(shape, like).gaussian(0.0, math.sqrt(2.0 / fan))


def positive_int(owner: str, name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise BadInputError(f"{owner}: {name} must be a positive integer, received {value!r}")
    return int(value)


def _ints(value: Any) -> list[Any] | None:
    """An int as ``[value]``, a sequence as a list, anything else as None."""
    if isinstance(value, (int, np.integer)):
        return [value]
    if isinstance(value, (list, tuple)):
        return list(value)
    return None


def _all_ints(values: list[Any], minimum: int) -> bool:
    return all(
        isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= minimum
        for v in values
    )


def int_tuple(owner: str, name: str, value: Any, n: int, minimum: int = 1) -> list[int]:
    """An int or ``n`` ints (kernel size, stride, dilation), each at least ``minimum``."""
    values = _ints(value)
    if values is not None and len(values) == 1:
        values = values * n
    if values is None or len(values) != n or not _all_ints(values, minimum):
        raise BadInputError(
            f"{owner}: {name} must be an int or {n} ints, each >= {minimum}, received {value!r}"
        )
    return [int(v) for v in values]


def pads_for(owner: str, padding: Any, n: int) -> list[int]:
    """A padding as ONNX ``pads`` (begins then ends): an int, ``n`` values or ``2n`` values."""
    values = _ints(padding)
    if values is not None and len(values) in (1, n):
        values = values * (2 * n // len(values))
    if values is None or len(values) != 2 * n or not _all_ints(values, 0):
        raise BadInputError(
            f"{owner}: padding must be a non-negative int, {n} values or {2 * n} values "
            f"(begins then ends), received {padding!r}"
        )
    return [int(v) for v in values]


def _torch_data(value: Any, owner: str, name: str) -> torch.Tensor:
    if isinstance(value, Tensor):
        return value.data.detach()
    if isinstance(value, torch.Tensor):
        return value.detach()
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value)  # host: copy_ moves it to the parameter's device
    raise BadInputError(
        f"{owner}: {name} must be a Tensor, torch tensor or NumPy array, "
        f"received {type(value).__name__}"
    )
