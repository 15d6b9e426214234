"""``prepare`` and ``SingaRep``: an ONNX model as a runnable, trainable sonnx graph.

``prepare`` validates the model, turns initializers into tensors (float ones into trainable
parameters), evaluates ``Constant`` nodes once, and resolves every node to a converter before
anything runs. ``SingaRep.run`` then executes the nodes in order on sonnx tensors; torch
autograd records the gradient, so the result can be trained with
:func:`sonnx.autograd.backward`. Each run is recorded as one
:class:`~sonnx.runtime.imported_graph.ImportedGraph` operator, so :func:`sonnx.to_onnx` writes the
original graph (pruned at a cut, with the current weights) rather than a trace of the run.

``prepare(model, use_graph=True)`` runs inference through one compiled graph per input
signature instead (see :mod:`sonnx.runtime.graph_mode`); such runs are not recorded.

``SONNX_DEBUG=1`` in the environment prints, per node, its op, its inputs' shapes and dtypes
and the time it took.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar

import numpy as np
import onnx
import onnx.inliner

import sonnx.onnx.converters  # noqa: F401  (registers every converter)
from sonnx.device import Device, as_device
from sonnx.engine.operator import is_training
from sonnx.errors import BadInputError
from sonnx.host_memory import release_freed_memory
from sonnx.onnx.model_file import StoredWeight
from sonnx.onnx.model_loading import ModelSource, load_model, opset_versions
from sonnx.operators.quantize.ort_kernels import KERNEL_CHOICES, choose_kernels
from sonnx.runtime.array_runs import ArrayRuns
from sonnx.runtime.compile_budget import DEFAULT_COMPILE_BUDGET, CompileBudget
from sonnx.runtime.graph_mode import GraphRunner
from sonnx.runtime.graph_weights import graph_weights
from sonnx.runtime.imported_graph import GraphSource, ImportedGraph
from sonnx.runtime.input_binding import bind_inputs
from sonnx.runtime.input_specs import (
    InputSpec,
    input_spec,
)
from sonnx.runtime.kept_model import without_large_values
from sonnx.runtime.layer_table import inferred_shapes, layer_table
from sonnx.runtime.program import GraphProgram, compile_graph
from sonnx.runtime.run_paths import Path, RunTaken, announce, choose_path, explain_run, took
from sonnx.runtime.store import graph_digest
from sonnx.tensor import Tensor


@dataclass(repr=False)
class SingaRep:
    """A prepared ONNX model. Run it with :meth:`run`; its weights are in :attr:`params`.

    ``program.steps`` are the model's layers in execution order: every node except ``Constant``
    nodes, whose values were computed once by :func:`prepare` and live in :attr:`constants`
    with the initializers. ``tensor_map`` holds the model's weights only (as :attr:`params`),
    so SINGA's idiom of setting ``requires_grad``/``stores_grad`` on every tensor in it never
    makes an exponent, an epsilon or a shape trainable. :func:`prepare` makes one; its fields
    are:

    :param model: the ONNX model as loaded, except that the data of its large initializers
        (1 KiB and more) is cleared: the tensors in :attr:`constants` are the one copy of the
        weights (see :mod:`sonnx.runtime.kept_model`). Its nodes, inputs, outputs and every
        initializer's name, element type and dims are there; :meth:`current_model` gives the
        whole model with the current weights.
    :param device: the device it runs on.
    :param tensor_map: the trainable weights by name, as :attr:`params` lists them.
    :param input_specs: the inputs to feed, in the graph's order (initializers left out).
    :param outputs: the graph's output names, what :meth:`run` returns by default.
    :param program: the compiled graph: its steps and constants.
    :param source: what :func:`sonnx.to_onnx` writes back for the graph.
    :param graph_runner: the graph-mode runner (``prepare(..., use_graph=True)``), else None.
    :param array_runs: graph-mode runs of plain NumPy arrays on the CPU (see
        :mod:`sonnx.runtime.array_runs`), else None.
    :param origin: the ``.onnx`` file it was prepared from (None: a ModelProto or bytes).
    :param kernels: which kernels its products run (see :func:`prepare`).
    :param rewrites: what was done to the program after preparing it (QAT's fake quantization),
        done again to a rep prepared from a rewrite of the model (:func:`prepare_rewritten`).
    """

    model: onnx.ModelProto
    device: Device
    tensor_map: dict[str, Tensor]
    input_specs: list[InputSpec]
    outputs: list[str]
    program: GraphProgram
    source: GraphSource
    graph_runner: GraphRunner | None = None
    array_runs: ArrayRuns | None = None
    origin: str | None = None
    #: The path the last run (of any thread) took, as :meth:`explain` reports it.
    _last_run: ClassVar[RunTaken | None] = None
    kernels: str = KERNEL_CHOICES[0]
    rewrites: tuple[Callable[[SingaRep], None], ...] = ()

    @property
    def constants(self) -> dict[str, Tensor]:
        """Every value the graph holds by name: weights, statistics, other initializers and
        the values of Constant nodes."""
        return self.program.constants

    @property
    def steps(self) -> list:
        """The layers in execution order (see :meth:`summary`)."""
        return self.program.steps

    @property
    def inputs(self) -> list[str]:
        """Names of the inputs to feed (graph inputs that are not initializers)."""
        return [s.name for s in self.input_specs]

    @property
    def params(self) -> dict[str, Tensor]:
        """The trainable weights by name: float initializers, Constant nodes' weights and the
        weights inside subgraphs (see :mod:`sonnx.runtime.graph_weights`)."""
        return graph_weights(self.program)

    def current_model(self) -> onnx.ModelProto:
        """The whole model, every initializer holding its current value (trained weights
        included): :attr:`model` with the weights' bytes written back from the tensors. Built
        on each call, so it holds a second copy of the weights only while the caller keeps it.

        :returns: a new ``onnx.ModelProto``.
        """
        return self.source.current_model()

    # ---- running --------------------------------------------------------------------------
    def run(
        self,
        inputs: Any,
        last_layers: int = -1,
        all_outputs: bool = False,
        aux_output: Sequence[str] = (),
        output: str | None = None,
    ) -> list[Tensor] | dict[str, Tensor]:
        """Run the model on ``inputs`` (tensors, arrays, a dict by name, or one tensor).

        ``last_layers=-1`` runs the whole model and returns its outputs; ``-k`` drops the last
        ``k - 1`` layers (nodes other than Constant) and returns the outputs of the last layer
        run. ``output="name"`` stops once tensor ``name`` is computed and returns it.
        ``all_outputs=True`` returns every computed tensor by name; ``aux_output`` names extra
        tensors appended to the returned list.

        :param inputs: one value per graph input: a list in the order of :attr:`inputs`, a
            dict by input name, or a single Tensor or array for a one-input model. Values are
            sonnx Tensors, torch tensors or NumPy arrays (a dict for a map input, a list for a
            sequence input, None for an empty optional).
        :param last_layers: ``-1`` for the whole model, ``-k`` to drop the last ``k - 1``
            layers (:meth:`summary` lists each layer's value).
        :param all_outputs: return every tensor computed, by name.
        :param aux_output: names of further tensors to return after the outputs.
        :param output: the name of one tensor to stop at and return.
        :returns: the outputs as Tensors, in the model's output order (a dict by name with
            ``all_outputs``); ``tensor.to_numpy`` gives NumPy arrays.
        :raises BadInputError: an input is missing, unknown, or not of its declared element
            type or fixed dims; ``last_layers`` or ``output`` names no layer or tensor.
        :raises SonnxError: a node fails while running (the error names it, with its inputs'
            dtypes and shapes); :class:`~sonnx.errors.ResourceLimitError` for sizes or loops
            above the limits.
        """
        whole = last_layers == -1 and output is None and not all_outputs and not aux_output
        choice = announce(choose_path(self.graph_runner is not None, whole, is_training()))
        compiled_run = choice.path is Path.COMPILED
        arrays = self.array_runs if compiled_run and type(inputs) in (list, dict) else None
        if arrays is not None:
            fast = arrays.run(inputs)
            if fast is not None:
                self._last_run = took(fast[2])
                return ImportedGraph.record_values(self.source, fast[0], self.outputs, fast[1])
        bound = bind_inputs(inputs, self.input_specs, self.device)
        if compiled_run:
            compiled, taken = self.graph_runner.run(bound)
            self._last_run = took(taken)  # a None from the runner: the program's steps run
            if compiled is not None:
                if arrays is not None:
                    arrays.remember(inputs, bound)
                return ImportedGraph.record_values(self.source, bound, self.outputs, compiled)
        else:
            self._last_run = RunTaken(Path.PROGRAM, why=choice.why)
        values = dict(self.constants)
        values.update(bound)
        stop, wanted = self._plan_stop(last_layers, output)
        if all_outputs:
            computed: dict[str, Tensor] = {}
            self.program.runner.execute(values, stop, computed)
            return ImportedGraph.record(self.source, bound, computed)
        if wanted is not None:
            names = wanted
        elif stop < len(self.steps):
            names = [n for n in self.steps[stop - 1].outputs if n]
        else:
            names = list(self.outputs)
        self.program.runner.execute(values, stop, keep={*names, *aux_output})
        missing = [n for n in [*names, *aux_output] if n not in values]
        if missing:
            raise BadInputError(f"run: tensor(s) {missing} were not computed by this run")
        order = list(dict.fromkeys([*names, *aux_output]))
        results = ImportedGraph.record(self.source, bound, {n: values[n] for n in order})
        return [results[n] for n in names] + [results[n] for n in aux_output]

    def _plan_stop(self, last_layers: int, output: str | None) -> tuple[int, list[str] | None]:
        """How many steps to run, and which tensor names to return (None: the default)."""
        if output is not None:
            for i, step in enumerate(self.steps):
                if output in step.outputs:
                    return i + 1, [output]
            if output in self.constants:
                return 0, [output]
            raise BadInputError(
                f"run: no node produces a tensor named {output!r}; layer outputs are e.g. "
                f"{[s.outputs[0] for s in self.steps[-5:] if s.outputs]}"
            )
        n = len(self.steps)
        if last_layers == -1:
            return n, None
        if not isinstance(last_layers, int) or last_layers >= 0 or last_layers < -n:
            raise BadInputError(
                f"run: last_layers must be an int in [-{n}, -1] (-1 runs the whole model, -k "
                f"drops the last k-1 of its {n} layers), received {last_layers!r}"
            )
        return n + last_layers + 1, None

    # ---- generating -----------------------------------------------------------------------
    def generate(
        self,
        input_ids: Any,
        max_new_tokens: int = 32,
        do_sample: bool = False,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
        num_beams: int = 1,
        eos_token_id: int | Sequence[int] | None = None,
        attention_mask: Any = None,
        streamer: Any = None,
        **options: Any,
    ) -> np.ndarray:
        """Generate tokens with a decoder that has a KV cache (optimum's ``past_key_values``
        names): the prompts followed by their continuations. See
        :func:`sonnx.generation.generate_tokens` for the arguments and ``options`` (``seed``,
        ``pad_token_id``, ``layout``, ``cuda_graph``: the decode step captured as a CUDA graph
        and replayed, for a shared-buffer layout in graph mode on a CUDA device).

        :param input_ids: one prompt, a (batch, length) array, or a list of prompts of any
            lengths.
        :param max_new_tokens: the most tokens generated per sequence (>= 1).
        :param do_sample: True samples, False is greedy.
        :param temperature: the sampling temperature (> 0).
        :param top_k: sample among the ``top_k`` most likely tokens (0: all).
        :param top_p: sample among the most likely tokens holding ``top_p`` of the probability.
        :param num_beams: the beams of beam search; 1 for greedy or sampled decoding.
        :param eos_token_id: the id or ids that end a sequence; None for none.
        :param attention_mask: the (batch, length) mask of a left-padded ``input_ids``, or None.
        :param streamer: called after each step with the (batch,) new tokens, or None.
        :param options: ``seed``, ``pad_token_id``, ``layout`` and ``cuda_graph``.
        :returns: the (batch, prompt length + new) int64 token ids.
        :raises BadInputError: an argument is out of range, the prompt has the wrong type or
            shape, or ``cuda_graph`` cannot hold (see ``generate_tokens``).
        :raises BadModelError: the graph is no decoder in optimum's layout (pass ``layout``).
        """
        from sonnx.generation.search import generate_tokens

        return generate_tokens(
            self,
            input_ids,
            max_new_tokens,
            do_sample,
            temperature,
            top_k,
            top_p,
            num_beams,
            eos_token_id,
            attention_mask,
            streamer,
            **options,
        )

    # ---- describing -----------------------------------------------------------------------
    @cached_property
    def shapes(self) -> dict[str, str]:
        """Tensor shapes by name from ONNX shape inference (computed on first use)."""
        return inferred_shapes(self.model)

    def explain(
        self,
        inputs: Any = None,
        last_layers: int = -1,
        all_outputs: bool = False,
        aux_output: Sequence[str] = (),
        output: str | None = None,
    ) -> str:
        """Which way :meth:`run` with these arguments goes in this thread, and why: compiled
        graph mode part by part (compiled segments, steps run eagerly and the reason), or the
        program through its generated plan or its step loop; then the path the last run (of
        any thread) actually took, a graph-mode run's eager fallback and its reason included.
        ``SONNX_DEBUG=1`` prints the path of every run.

        :param inputs: the inputs :meth:`run` would get (optional); they decide whether their
            shapes were compiled before.
        :param last_layers: as in :meth:`run`.
        :param all_outputs: as in :meth:`run`.
        :param aux_output: as in :meth:`run`.
        :param output: as in :meth:`run`.
        :returns: the explanation, several lines of text.
        :raises BadInputError: as :meth:`run` does for the same ``inputs``, ``last_layers`` and
            ``output``.
        """
        whole = last_layers == -1 and output is None and not all_outputs and not aux_output
        choice = choose_path(self.graph_runner is not None, whole, is_training())
        stop, _ = self._plan_stop(last_layers, output)
        values = None
        if inputs is not None:
            values = dict(self.constants)
            values.update(bind_inputs(inputs, self.input_specs, self.device))
        return explain_run(
            self.program, self.graph_runner, choice, stop, all_outputs, values, self._last_run
        )

    def summary(self) -> str:
        """A table of layers: index, the ``last_layers`` value that stops after it, op, node
        name, the names of its output tensors (what ``run(output=...)`` and
        ``sonnx run --output`` take), and the first output's shape (from ONNX shape inference;
        ``?`` where it is unknown).

        :returns: the table, one line per layer after a header line.
        """
        return layer_table(self.steps, self.shapes)

    def __str__(self) -> str:
        return self.summary()

    def __repr__(self) -> str:
        inputs = ", ".join(f"{s.name}: {s.describe()}" for s in self.input_specs)
        mode = ", use_graph=True" if self.graph_runner is not None else ""
        return (
            f"<SingaRep {len(self.steps)} layers on {self.device}{mode}; inputs {inputs}; "
            f"outputs {', '.join(self.outputs)}>"
        )


def prepare(
    model: ModelSource,
    device: Device | None = None,
    use_graph: bool = False,
    *,
    verify: bool = True,
    compile_budget: float | None = DEFAULT_COMPILE_BUDGET,
    kernels: str = "onnxruntime",
    **options: Any,
) -> SingaRep:
    """Load and check an ONNX model and make it runnable on ``device``.

    Accepts a ModelProto, a path or serialized bytes. Unsupported nodes are all reported in one
    :class:`~sonnx.errors.UnsupportedOperatorError` before anything runs. With ``use_graph``,
    inference runs of the whole model go through ``torch.compile`` (see
    :mod:`sonnx.runtime.graph_mode`); training runs, cuts and ``all_outputs`` stay eager.

    :param model: the ONNX model: an ``onnx.ModelProto``, a path to a ``.onnx`` file (weights in
        external data files beside it are read), or the serialized bytes.
    :param device: where the weights live and runs happen (None: the default device, see
        :func:`sonnx.device.get_default_device`).
    :param use_graph: run whole-model inference through one compiled graph per input
        signature.
    :param verify: with ``use_graph``, compare each graph's first run, and its first at other
        input sizes, with the eager steps; a graph that differs is dropped for eager steps,
        with a :class:`~sonnx.errors.GraphModeWarning` (up to two eager runs per graph).
    :param compile_budget: with ``use_graph``, the seconds compiling may take for this model
        (None: no bound); once spent, what is not compiled yet runs eagerly, with a warning.
    :param kernels: ``"onnxruntime"``: onnxruntime's CPU kernel runs the int4/int8 products
        torch has none for, where importable (:mod:`sonnx.operators.quantize.ort_kernels`);
        ``"torch"``: torch's kernels everywhere.
    :param options: no other keyword options are accepted; any is an error.
    :returns: the runnable model.
    :raises BadModelError: the file is missing, the file or bytes are not a valid ONNX model,
        or a node breaks its ``onnx.defs`` schema (counts, attributes, types).
    :raises UnsupportedOperatorError: the model uses operators sonnx has no converter for (all
        of them listed).
    :raises BadInputError: an unknown keyword option, or a ``compile_budget`` that is not a
        positive number of seconds, or ``kernels`` not one of those two.
    """
    if options:
        raise BadInputError(f"prepare: unknown option(s) {sorted(options)}")
    graph = GraphSettings(verify, CompileBudget(compile_budget).seconds) if use_graph else None
    # From a path, the large weights stay in the file until each is read into its tensor.
    proto, stored = load_model(model)
    rep = _prepared(proto, as_device(device), graph, stored, kernels=kernels)
    rep.origin = None if isinstance(model, (onnx.ModelProto, bytes)) else str(model)
    if not isinstance(model, onnx.ModelProto):
        # The model read from the file or bytes is gone now, its weights' bytes with it:
        # hand that memory back (glibc keeps freed blocks under its mmap threshold, up to
        # 32 MiB each, on its heap). A caller's ModelProto is the caller's to free.
        del proto
        release_freed_memory()
    return rep


def prepare_rewritten(model: onnx.ModelProto, rep: SingaRep) -> SingaRep:
    """A new SingaRep of ``model``, a rewrite of ``rep.model`` (new nodes, new initializers),
    on ``rep``'s device and in its mode, holding the weights once with ``rep``; ``rep``'s
    rewrites are done to it again.

    Each weight or constant of ``model`` that ``rep`` holds gets ``rep``'s tensor, its storage
    shared (current values, trained ones included), whatever ``model`` has for it: so
    ``model`` may carry those as headers without bytes, as ``rep.model`` does, and preparing
    it copies no weight. Its other initializers are decoded from ``model``.

    :param model: the rewritten model (the headers of ``rep``'s large initializers suffice).
    :param rep: the prepared model it was rewritten from.
    :returns: the prepared rewrite.
    :raises BadModelError: as :func:`prepare`; also an initializer without values that
        ``rep`` does not hold.
    :raises UnsupportedOperatorError: as :func:`prepare`.
    """
    proto, stored = load_model(model)
    runner = rep.graph_runner
    graph = None if runner is None else GraphSettings(runner.verify, runner.budget.seconds)
    held = {**rep.params, **rep.constants}
    rewritten = _prepared(proto, rep.device, graph, stored, held=held, kernels=rep.kernels)
    rewritten.origin, rewritten.rewrites = rep.origin, rep.rewrites
    for rewrite in rep.rewrites:
        rewrite(rewritten)
    return rewritten


@dataclass(frozen=True)
class GraphSettings:
    """How a model prepared with ``use_graph=True`` compiles.

    :param verify: compare graphs' runs with the eager steps (see :func:`prepare`).
    :param compile_budget: the seconds compiling may take for the model (None: no bound).
    """

    verify: bool
    compile_budget: float | None


def _prepared(
    proto: onnx.ModelProto,
    dev: Device,
    graph_settings: GraphSettings | None,
    stored: Mapping[str, StoredWeight],
    held: Mapping[str, Tensor] | None = None,
    kernels: str = KERNEL_CHOICES[0],
) -> SingaRep:
    """The SingaRep of a loaded model; it keeps the model without its weights' bytes.
    ``graph_settings``: graph mode's, None without it; ``stored``: where the initializers that
    ``proto`` holds as headers only lie; ``held``: tensors whose storage the initializers of
    their names take (no copy); ``kernels``: which kernels the products run."""
    # Model-local functions run inlined; the export writes the original calls (GraphSource).
    graph = onnx.inliner.inline_local_functions(proto).graph if proto.functions else proto.graph
    initializer_names = {i.name for i in graph.initializer}
    input_specs = [input_spec(v) for v in graph.input if v.name not in initializer_names]
    opsets = opset_versions(proto)
    names = [s.name for s in input_specs]
    program = compile_graph(graph, opsets, dev, names, stored=stored, held=held)
    weights = graph_weights(program)
    runner = (
        GraphRunner(
            program,
            declared_shapes={s.name: s.shape for s in input_specs},
            identity=graph_digest(graph, opsets),
            verify=graph_settings.verify,
            compile_budget=graph_settings.compile_budget,
        )
        if graph_settings is not None
        else None
    )
    calls = [c for fusion in program.fusions.values() for c in fusion.calls]
    choose_kernels([*program.steps, *calls], kernels, program.constants, runner)
    source = GraphSource(without_large_values(proto, program.constants), program)
    return SingaRep(
        model=source.model,
        device=dev,
        tensor_map=weights,
        input_specs=input_specs,
        outputs=list(program.output_names),
        program=program,
        source=source,
        graph_runner=runner,
        array_runs=(
            ArrayRuns(
                runner, [s.name for s in input_specs], [s.plain_array_dtype for s in input_specs]
            )
            if runner is not None and dev.torch_device.type == "cpu"
            else None
        ),
        kernels=kernels,
    )
