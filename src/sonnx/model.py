"""``Model``: a :class:`~sonnx.layer.Layer` that trains itself (SINGA 3's ``model`` module).

A model is compiled once on placeholder inputs (which creates every lazily-shaped parameter),
then called: in training mode ``model(x, y)`` runs :meth:`Model.train_one_batch`, in
inference mode ``model(x)`` runs :meth:`Model.forward`.

Graph mode (``compile(..., use_graph=True)``) runs ``forward`` through ``torch.compile``: the
model's own eager ``forward`` is traced into a graph of torch operations over the state
tensors and compiled (see :class:`_CompiledGraph`); each call is recorded as one
``CompiledForward`` node whose inputs are the model inputs and every state tensor, so
``autograd.backward`` still finds the parameters and the optimizer works unchanged. Export
walks the per-operator graph, so export a model in eager mode (``model.graph(False)``).

``compile(..., precision="bf16" | "fp16")`` trains in mixed precision (see
:mod:`sonnx.precision`): each training step runs under autocast, float16 with dynamic loss
scaling by the optimizer.

States are saved with :meth:`Model.save_states` in the file format of :mod:`sonnx.model_states`
(a zip of a JSON manifest and NumPy arrays, no pickle, written atomically).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import onnx
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import sonnx.autograd as autograd
from sonnx import dist
from sonnx.compiler_warnings import torch_deprecations_ignored
from sonnx.device import Device, get_default_device
from sonnx.dtypes import dtype_name
from sonnx.engine.operator import Operator
from sonnx.engine.tracing import NotTraceableError, ValueFlow, tracing
from sonnx.errors import BadInputError, ExportError
from sonnx.layer import Layer, SoftMaxCrossEntropy
from sonnx.model_states import read_states, write_states
from sonnx.opt import DistOpt, Optimizer
from sonnx.opt.loss_scaler import LossScaler
from sonnx.precision import autocast, check_precision
from sonnx.tensor import Tensor

if TYPE_CHECKING:
    from sonnx.onnx.export_names import DynamicAxes
    from sonnx.proto.graph_builder import GraphBuilder

__all__ = ["Model"]

#: inductor's options for a graph on the CPU: its kernels (forward and backward) launched
#: from generated C++ instead of Python, about 3 % of an imported BERT-style training step.
CPU_INDUCTOR_OPTIONS = {"cpp_wrapper": True}


class CompiledForward(Operator):
    """A model's whole forward in graph mode: one node running the ``torch.compile``'d function.

    Inputs are the model inputs followed by every state tensor, which the compiled graph takes
    as arguments; listing the states here also lets ``autograd.backward`` find the parameters
    behind the loss.
    """

    op_type = "CompiledForward"

    def __init__(self, fn: Any, n_inputs: int) -> None:
        super().__init__()
        self._fn = fn
        self._n_inputs = n_inputs

    def forward(self, *xs: torch.Tensor | None) -> Any:
        return self._fn(xs[self._n_inputs :], xs[: self._n_inputs])

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        raise ExportError(
            "CompiledForward: a model run in graph mode (use_graph=True) records one compiled "
            "node, which has no ONNX form; call model.graph(False) and run forward again to "
            "record the per-operator graph, then export"
        )


def _autocast_state(device_type: str) -> torch.dtype | None:
    """The autocast dtype in force on ``device_type`` (a traced graph bakes its casts in)."""
    if not torch.is_autocast_enabled(device_type):
        return None
    return torch.get_autocast_dtype(device_type)


def _signature(t: torch.Tensor) -> tuple[Any, ...]:
    """What a traced graph is specialised on, per tensor."""
    return (tuple(t.shape), t.dtype, t.device, t.requires_grad)


class _CompiledGraph:
    """A model's forward traced to an FX graph of torch ops, then ``torch.compile``'d.

    ``make_fx`` (pre-dispatch, so no-grad regions such as running-statistics updates are
    kept) runs the eager forward once with the state tensors swapped for copies, recording
    only torch operations; all of sonnx's Python (operator dispatch, attribute lookups,
    checks) runs at trace time, so the compiled graph is free of graph breaks. The graph takes
    the state tensors as inputs, so parameters updated in place, or in-place buffer updates,
    need no re-tracing; a change of input shapes, dtypes, devices or the training flag makes
    the model trace a new graph (see ``Model._graph_forward``).
    """

    def __init__(self, model: Model, states: list[Tensor], inputs: Sequence[Tensor]) -> None:
        self._model = model
        self._states = states
        copies = [s.data.detach().clone().requires_grad_(s.data.requires_grad) for s in states]

        # make_fx traces a plain function (a bound method would count self as an argument).
        def pure(states: list[torch.Tensor], xs: list[torch.Tensor]) -> Any:
            return self._pure(states, xs)

        with torch_deprecations_ignored():
            graph = make_fx(pure, pre_dispatch=True)(copies, [x.data for x in inputs])
            on_cpu = all(t.device.type == "cpu" for t in (*copies, *(x.data for x in inputs)))
            inductor = model.graph_backend == "inductor"
            options = CPU_INDUCTOR_OPTIONS if on_cpu and inductor else None
            self._compiled = torch.compile(graph, backend=model.graph_backend, options=options)
        # torch.compile compiles at the first call (the backward at the first backward).
        self._first_call = True

    def _pure(self, states: Sequence[torch.Tensor], xs: Sequence[torch.Tensor]) -> Any:
        """The eager forward as a function of torch tensors (what ``make_fx`` traces)."""
        saved = [s.data for s in self._states]
        try:
            for s, data in zip(self._states, states, strict=True):
                s.data = data
            # Integer states are constants (an imported graph's shape indices): not traced, so
            # shape arithmetic over them folds into the graph.
            traced = [*(t for t in states if t.is_floating_point()), *xs]
            with tracing(), ValueFlow(traced):
                out = type(self._model).forward(
                    self._model, *(Tensor(data=x, requires_grad=x.requires_grad) for x in xs)
                )
        finally:
            for s, data in zip(self._states, saved, strict=True):
                s.data = data
        if isinstance(out, Tensor):
            return out.data
        return tuple(o.data for o in out)

    def __call__(self, states: Sequence[torch.Tensor], xs: Sequence[torch.Tensor]) -> Any:
        if self._first_call:
            self._first_call = False
            with torch_deprecations_ignored():
                return self._compiled(list(states), list(xs))
        return self._compiled(list(states), list(xs))


class Model(Layer):
    """Base class of trainable models: override ``forward`` and usually ``train_one_batch``."""

    #: ``torch.compile`` backend used in graph mode.
    graph_backend = "inductor"

    def __init__(self) -> None:
        super().__init__()
        self.graph_mode = False
        self.sequential = False
        self.optimizer: Optimizer | None = None
        self.precision = "fp32"
        self._loss_scaler: LossScaler | None = None
        self.loss_fn: Layer = SoftMaxCrossEntropy()
        self._device: Device = get_default_device()
        self._graphs: dict[Any, _CompiledGraph] = {}
        self._graph_states: list[Tensor] | None = None
        # Why graph mode fell back to eager execution for this model (None: it did not).
        self._graph_fallback: str | None = None

    # ---- set-up ---------------------------------------------------------------------------
    def compile(
        self,
        inputs: Sequence[Tensor],
        is_train: bool = True,
        use_graph: bool = False,
        sequential: bool = False,
        precision: str = "fp32",
    ) -> None:
        """Create every parameter by running ``forward`` once on ``inputs`` (placeholders with
        the real shapes, dtypes and device), name the states, and set the mode.

        The initialising pass runs in inference mode so it changes no running statistics.
        ``sequential`` is SINGA's request to run graph operations in order; ``torch.compile``
        schedules kernels itself, so it is recorded but changes nothing.

        ``precision`` is ``"fp32"``, ``"bf16"`` or ``"fp16"``: a training call
        (``model(x, y)``, i.e. ``train_one_batch``) of a lower precision runs under
        ``torch.autocast`` with that dtype on the model's device, its parameters and optimizer
        state staying float32; ``"fp16"`` also gives the optimizer a
        :class:`~sonnx.opt.loss_scaler.LossScaler` (whether set before or after compiling),
        used by ``optimizer(loss)`` and :class:`~sonnx.opt.DistOpt`'s modes. Inference
        (``model(x)`` in eval mode) runs in float32.

        :param inputs: one Tensor per ``forward`` argument, of the real shapes, dtypes and
            device (``tensor.PlaceHolder`` or real data).
        :param is_train: leave the model in training mode (else inference mode).
        :param use_graph: run ``forward`` through ``torch.compile`` (see :meth:`graph`).
        :param sequential: SINGA's flag, recorded only.
        :param precision: ``"fp32"``, ``"bf16"`` or ``"fp16"`` for training calls.
        :raises BadInputError: an unknown ``precision``, or ``inputs`` that are not a non-empty
            list of Tensors.
        """
        check_precision(precision, f"{type(self).__name__}.compile")
        if (
            not isinstance(inputs, (list, tuple))
            or not inputs
            or not all(isinstance(x, Tensor) for x in inputs)
        ):
            raise BadInputError(
                f"{type(self).__name__}.compile: inputs must be a non-empty list of Tensors "
                f"(placeholders with the input shapes), received {inputs!r}"
            )
        self._device = inputs[0].device
        previous = autograd.training
        autograd.training = False
        try:
            type(self).forward(self, *inputs)
        finally:
            autograd.training = previous
        self._initialized = True
        self.get_states()  # names every state after its attribute path
        self.train(is_train)
        self.graph(use_graph, sequential)
        self.precision = precision
        self._loss_scaler = (
            LossScaler(self._device.torch_device.type) if precision == "fp16" else None
        )
        self._attach_loss_scaler()

    def graph(self, mode: bool = True, sequential: bool = False) -> None:
        """Switch graph mode (``torch.compile``) on or off.

        A ``forward`` whose control flow follows tensor values cannot be traced; it then runs
        eagerly, with a ``RuntimeWarning`` once.

        :param mode: True to run ``forward`` compiled, False to run it eagerly.
        :param sequential: SINGA's request to run operations in order, recorded only.
        """
        self.graph_mode = bool(mode)
        self.sequential = bool(sequential)
        self._graphs = {}
        self._graph_states = None
        if self.graph_mode:
            # An instance attribute shadows the class's forward, so user code calling
            # self.forward (e.g. in train_one_batch) runs the compiled version.
            self.__dict__["forward"] = self._graph_forward
        else:
            self.__dict__.pop("forward", None)

    def set_optimizer(self, optimizer: Optimizer | DistOpt) -> None:
        """Train with ``optimizer``; it gets the model's loss scaler (None unless fp16).

        :param optimizer: a :mod:`sonnx.opt` optimizer, or a :class:`~sonnx.opt.DistOpt`.
        :raises BadInputError: ``optimizer`` is neither.
        """
        if not isinstance(optimizer, (Optimizer, DistOpt)):
            raise BadInputError(
                f"{type(self).__name__}.set_optimizer: expected a sonnx.opt Optimizer, "
                f"received {type(optimizer).__name__}"
            )
        self.optimizer = optimizer
        self._attach_loss_scaler()

    def _attach_loss_scaler(self) -> None:
        """Hand the model's loss scaler (None unless fp16) to its optimizer; also done at
        every training call, for subclasses that set ``self.optimizer`` themselves."""
        optimizer = self.optimizer.opt if isinstance(self.optimizer, DistOpt) else self.optimizer
        if isinstance(optimizer, Optimizer):
            optimizer.loss_scaler = self._loss_scaler

    # ---- running --------------------------------------------------------------------------
    def train_one_batch(self, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        """One optimisation step: ``out = forward(x)``, ``loss = loss_fn(out, y)``, then
        ``optimizer(loss)``; returns ``(out, loss)``. Override for anything else.

        ``model(x, y)`` in training mode calls it (under autocast for a lower precision).

        :param x: the batch's input.
        :param y: the batch's target, as ``loss_fn`` takes it (class labels for the default
            :class:`~sonnx.layer.SoftMaxCrossEntropy`).
        :returns: the model's output and the loss.
        :raises BadInputError: no optimizer was set.
        """
        if self.optimizer is None:
            raise BadInputError(
                f"{type(self).__name__}.train_one_batch: no optimizer; call "
                "model.set_optimizer(opt.SGD(...)) first"
            )
        out = self.forward(x)
        loss = self.loss_fn(out, y)
        self.optimizer(loss)
        return out, loss

    def __call__(self, *inputs: Any, **kwargs: Any) -> Any:
        """``train_one_batch`` in training mode, ``forward`` in inference mode (as SINGA)."""
        if self.training:
            self._attach_loss_scaler()
            with autocast(self.precision, self._device):
                return self.train_one_batch(*inputs, **kwargs)
        return self.forward(*inputs, **kwargs)

    def _graph_forward(self, *inputs: Tensor) -> Any:
        if self._graph_states is None:
            self._graph_states = list(self.get_states().values())
        states = self._graph_states
        key = (
            autograd.training,
            _autocast_state(self._device.torch_device.type),
            tuple(_signature(x.data) for x in inputs),
            tuple(_signature(s.data) for s in states),
        )
        if self._graph_fallback is not None:
            return type(self).forward(self, *inputs)
        fn = self._graphs.get(key)
        if fn is None:
            try:
                fn = self._graphs[key] = _CompiledGraph(self, states, inputs)
            except (RuntimeError, NotTraceableError) as e:
                if isinstance(e, RuntimeError) and not any(
                    marker in str(e) for marker in ("data-dependent", "tracing tensor")
                ):
                    raise
                # A forward whose control flow or shapes follow tensor values cannot become
                # one static graph, so it keeps running eagerly.
                self._graph_fallback = str(e).splitlines()[0]
                warnings.warn(
                    f"{type(self).__name__}: graph mode cannot trace this model's forward "
                    f"({self._graph_fallback}); running it eagerly, with the same results",
                    RuntimeWarning,
                    stacklevel=2,
                )
                return type(self).forward(self, *inputs)
        return CompiledForward(fn, len(inputs))(*inputs, *states)

    # ---- export ---------------------------------------------------------------------------
    def to_onnx(
        self,
        path: str | os.PathLike | None,
        example_inputs: Sequence[Tensor],
        opset: int | None = None,
        dynamic_batch: bool = True,
        input_names: Sequence[str] | None = None,
        output_names: Sequence[str] | None = None,
        dynamic_axes: DynamicAxes | None = None,
        dtype: str = "float32",
    ) -> onnx.ModelProto:
        """Export the model as ONNX: one eager forward in inference mode on
        ``example_inputs`` is recorded and written (saved to ``path`` when given).

        Batch-norm layers export with their running statistics and dropout as identity, as
        inference needs; the model's training mode and graph mode are restored afterwards.
        An imported part (a :class:`~sonnx.SONNXModel`) is written as its own graph. The
        names, ``dynamic_axes`` and ``dtype`` (``"float16"`` writes a float16 model) have
        :func:`sonnx.to_onnx`'s meaning.

        :param path: the file to write (None: only return the model).
        :param example_inputs: one Tensor per ``forward`` argument; their shapes become the
            graph inputs' shapes.
        :param opset: the default-domain opset (None: :func:`sonnx.to_onnx`'s default).
        :param dynamic_batch: make the inputs' axis 0 symbolic when no ``dynamic_axes`` are
            given.
        :param input_names: names for the graph inputs.
        :param output_names: names for the graph outputs.
        :param dynamic_axes: symbolic dims by input or output name.
        :param dtype: ``"float32"`` or ``"float16"``.
        :returns: the model.
        :raises ExportError: as :func:`sonnx.to_onnx` raises it (bad names, ``dynamic_axes`` or
            ``dtype``; a graph that cannot be written).
        :raises OpsetTooOldError: an operator cannot be written at ``opset``.
        """
        from sonnx.onnx.exporter import save, to_onnx

        was_training, was_graph, sequential = self.training, self.graph_mode, self.sequential
        self.eval()
        self.graph(False)
        try:
            outputs = type(self).forward(self, *example_inputs)
        finally:
            self.train(was_training)
            self.graph(was_graph, sequential)
        outs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
        model = to_onnx(
            list(example_inputs),
            outs,
            model_name=type(self).__name__,
            opset=opset,
            dynamic_batch=dynamic_batch,
            input_names=input_names,
            output_names=output_names,
            dynamic_axes=dynamic_axes,
            dtype=dtype,
        )
        if path is not None:
            save(model, path)
        return model

    # ---- checkpoints ----------------------------------------------------------------------
    def save_states(
        self, fpath: str | os.PathLike, aux_states: Mapping[str, Any] | None = None
    ) -> None:
        """Write every model state plus ``aux_states`` (e.g. ``optimizer.get_states()``, or
        the epoch as a 0-d array) to ``fpath`` atomically.

        In distributed training only rank 0 writes (the replicas hold the same weights), and
        the file loads into a single-process model like any other.

        The file is a zip of a JSON manifest and a NumPy ``.npz`` (no pickle).

        :param fpath: the file to write.
        :param aux_states: further values to keep, by name (Tensors, torch tensors, arrays or
            numbers); :meth:`load_states` returns them.
        :raises BadInputError: an aux state that cannot be stored as a tensor.
        :raises OSError: the file cannot be written.
        """
        if not dist.is_main():
            return
        states = {name: t.data for name, t in self.get_states().items()}
        write_states(os.fspath(fpath), states, aux_states)

    def load_states(self, fpath: str | os.PathLike) -> dict[str, Tensor]:
        """Restore the model states saved by :meth:`save_states`; returns the aux states.

        :param fpath: a file written by :meth:`save_states`.
        :returns: the ``aux_states`` saved with them, as Tensors by name.
        :raises BadInputError: no such file, not a sonnx states file (names what is wrong with
            it), states missing or extra against this model (compile it first), or a state of
            another shape or dtype.
        """
        path = os.fspath(fpath)
        model, aux = read_states(path)
        mine = self.get_states()
        missing = sorted(set(mine) - set(model))
        unknown = sorted(set(model) - set(mine))
        if missing or unknown:
            hint = "" if mine else " (this model has no states yet: compile it first)"
            raise BadInputError(
                f"load_states: {path} does not match {type(self).__name__}{hint}; states "
                f"missing from the file: {missing}; states the model does not have: {unknown}"
            )
        for name, data in model.items():
            target = mine[name]
            if tuple(data.shape) != target.shape or data.dtype != target.dtype:
                raise BadInputError(
                    f"load_states: {path}: state {name} must be {dtype_name(target.dtype)} of "
                    f"shape {target.shape}, the file holds {dtype_name(data.dtype)} of shape "
                    f"{tuple(data.shape)}"
                )
        with torch.no_grad():
            for name, data in model.items():
                mine[name].data.copy_(data)
        return {name: Tensor(data=data, requires_grad=False) for name, data in aux.items()}
