"""Graph mode for imported models: ``prepare(model, use_graph=True)``.

An inference run (``sonnx.autograd.training`` off, the whole graph, its declared outputs) is
traced once per input signature into an FX graph of torch operations (``make_fx``) and
compiled with ``torch.compile`` (inductor), the weights frozen in as constants so that, for
instance, convolution weights are packed once for oneDNN. All of sonnx's per-node Python runs
at trace time only.

Shape arithmetic (``Shape -> Gather -> Concat -> Reshape``, as in every exported BERT) depends
only on the input shapes, which the compiled graph is specialised on: :class:`ValueFlow`
follows which tensors carry input or weight values and runs every operation that touches none
of them *outside* the trace, on plain tensors, so its results become constants of the graph
and the host reads they feed (a reshape's target) happen once, at trace time.

A graph whose control flow or output shapes depend on input values (NonZero, Unique, an ``If``
on a computed condition, a host read of a computed value), or that draws random numbers, cannot
be one static graph: such a model keeps running eagerly, with a RuntimeWarning that says why.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch.fx import GraphModule
from torch.fx.experimental.proxy_tensor import make_fx

from sonnx.autograd.random_ops import RANDOM_OP_TYPES
from sonnx.autograd.tracing import NotTraceableError, ValueFlow, tracing
from sonnx.onnx.graph_program import GraphProgram
from sonnx.tensor import Tensor


def _signature(t: torch.Tensor) -> tuple[Any, ...]:
    return (tuple(t.shape), t.dtype, t.device)


class GraphRunner:
    """Compiled inference runs of one :class:`GraphProgram`, one per input signature.

    Trainable weights (``stores_grad``) are traced inputs turned into frozen constants of the
    compiled graph; every constant's identity and version counter are part of the cache key,
    so after a training step or ``load_states`` the next run compiles afresh.
    """

    def __init__(self, program: GraphProgram, backend: str = "inductor") -> None:
        self.program = program
        # The program's own (the SingaRep's tensor_map is the same dict), so weights a user
        # changes or trains are the ones compiled in.
        self.constants = program.constants
        self.input_names = program.input_names
        self.output_names = program.output_names
        self.backend = backend
        self._compiled: dict[tuple[Any, ...], tuple[tuple[Any, ...], Callable[..., Any]]] = {}
        # Input signatures whose trace or compile failed: they run eagerly.
        self._eager: set[tuple[Any, ...]] = set()
        #: Why this graph (or its last failed input signature) runs eagerly; None: it compiles.
        self.fallback: str | None = None
        self._program_fallback = False
        random = sorted({s.info.op_type for s in program.steps} & RANDOM_OP_TYPES)
        if random:
            self.fallback = f"it draws random numbers ({', '.join(random)})"
            self._program_fallback = True

    def run(self, inputs: dict[str, Tensor]) -> list[Tensor] | None:
        """The outputs of a compiled run, or None when this graph must run eagerly."""
        if self._program_fallback or not all(
            isinstance(inputs.get(n), Tensor) for n in self.input_names
        ):
            return None
        xs = [inputs[n].data for n in self.input_names]
        key = tuple(_signature(x) for x in xs)
        if key in self._eager:
            return None
        versions = tuple((id(t.data), t.data._version) for t in self.constants.values())
        entry = self._compiled.get(key)
        if entry is None or entry[0] != versions:
            try:
                entry = self._compiled[key] = (versions, self._compile(xs))
            except Exception as e:  # any failure to trace or compile: run eagerly instead
                self._give_up(key, e)
                return None
        with torch.no_grad():
            outs = entry[1](*xs)
        return [
            Tensor(data=t, requires_grad=False, name=name)
            for t, name in zip(outs, self.output_names, strict=True)
        ]

    def _give_up(self, key: tuple[Any, ...], error: Exception) -> None:
        """Run inputs of signature ``key`` eagerly from now on; warn the first time."""
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        self._eager.add(key)
        self._compiled.pop(key, None)
        if self.fallback is None:
            warnings.warn(
                f"graph mode cannot compile this model ({reason}); it runs eagerly, with the "
                "same results",
                RuntimeWarning,
                stacklevel=3,
            )
        self.fallback = reason

    def _compile(self, xs: list[torch.Tensor]) -> Callable[..., Any]:
        weights = {n: t for n, t in self.constants.items() if t.stores_grad}
        names = list(weights)

        def pure(*flat: torch.Tensor) -> list[torch.Tensor]:
            params, inputs = flat[: len(names)], flat[len(names) :]
            values: dict[str, Any] = dict(self.constants)
            values.update(
                (n, Tensor(data=p, requires_grad=False, name=n))
                for n, p in zip(names, params, strict=True)
            )
            values.update(
                (n, Tensor(data=x, requires_grad=False, name=n))
                for n, x in zip(self.input_names, inputs, strict=True)
            )
            with tracing(), ValueFlow([*params, *inputs]):
                self.program.execute(values, keep=set(self.output_names))
            outs = [values.get(n) for n in self.output_names]
            if not all(isinstance(o, Tensor) for o in outs):
                raise NotTraceableError("an output is not a tensor (a sequence or an optional)")
            return [o.data for o in outs]

        params = [weights[n].data.detach() for n in names]
        with torch.no_grad():
            graph = make_fx(pure)(*params, *xs)
            _freeze(graph, params)
            try:
                return _compiled(graph, xs, self.backend, pattern_matcher=True)
            except torch._dynamo.exc.BackendCompilerFailed:
                # inductor's pattern rewrites (attention fusion) can reject a graph whose
                # constants are tensors (a softmax scale computed from a shape); without them
                # the graph still compiles.
                return _compiled(graph, xs, self.backend, pattern_matcher=False)


def _compiled(
    graph: GraphModule, xs: list[torch.Tensor], backend: str, pattern_matcher: bool
) -> Callable[..., Any]:
    """``torch.compile`` of ``graph``, compiled now (first call) with the weights frozen in.

    ``cpp_wrapper`` makes inductor launch the kernels from C++ instead of a Python wrapper,
    which at batch 1 is a large part of a run (measured: MobileNet-v2 22 -> 14 ms, the BERT
    encoder 3.5 -> 2.7 ms) for a few more seconds of compiling.
    """
    compiled = torch.compile(graph, backend=backend, dynamic=False)
    options = {"freezing": True, "pattern_matcher": pattern_matcher, "cpp_wrapper": True}
    with torch._inductor.config.patch(**options):
        compiled(*xs)
    return compiled


def _freeze(graph: GraphModule, params: list[torch.Tensor]) -> None:
    """Turn the graph's first ``len(params)`` inputs into attributes holding ``params``, so the
    compiled graph takes only the model inputs and treats the weights as constants."""
    placeholders = [n for n in graph.graph.nodes if n.op == "placeholder"][: len(params)]
    for i, (node, value) in enumerate(zip(placeholders, params, strict=True)):
        attr = f"_weight_{i}"
        graph.register_buffer(attr, value)
        with graph.graph.inserting_before(node):
            constant = graph.graph.get_attr(attr)
        node.replace_all_uses_with(constant)
        graph.graph.erase_node(node)
    graph.graph.lint()
    graph.recompile()
