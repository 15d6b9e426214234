"""CUDA graphs for a model graph mode compiles whole: one launch replays all its kernels.

A model of many small operations (a streaming voice-activity detector: a few dozen kernels on
a chunk of 512 samples) spends its time on the GPU launching kernels, not running them. Graph
mode already runs such a model as one compiled library; :func:`capture_cuda_graph` records
that library's kernels, for fixed input shapes, into a :class:`torch.cuda.CUDAGraph`, and
:meth:`CapturedRun.run` copies new inputs into the graph's input buffers and replays it::

    rep = sonnx.prepare(model, device=cuda, use_graph=True)
    captured = capture_cuda_graph(rep, feeds)      # feeds: Tensors on the GPU, by name
    for chunk in stream:
        out, h, c = captured.run({"input": chunk, "h": h, "c": c})

It is opt-in, and holds where a CUDA graph holds:

- the model must compile as one graph (graph mode runs no step eagerly), on a CUDA device;
- the shapes are those captured: other shapes raise :class:`~sonnx.errors.BadInputError`
  (capture again for them);
- inputs graph mode bakes into the graph (a sample rate an ``If`` branches on) are fixed at
  capture, and are not fed again;
- the outputs are the graph's own buffers, which the next replay overwrites (clone to keep
  them); feeding them back (a recurrent state) is fine;
- the input buffers are copies of the feeds made at capture, except the inputs named
  ``held``: their fed tensors are the buffers themselves, which every replay reads and, where
  the model writes an input in place (a decode step's KV cache, written by
  GroupQueryAttention under :data:`~sonnx.run_state.CACHES_IN_PLACE`), writes. They are not
  fed again; the caller changes them in place between replays, if at all;
- the weights are those captured (frozen in, as in graph mode): after a training step or
  ``load_states``, capture again.

The captured run has its own copy of the compiled library (loaded again from the graph store;
it reads the model's weights, as the first does): AOTInductor's runner records a CUDA event at
the end of each run and waits on the last one before the next, and an event recorded during
capture cannot be waited on by a run outside it, so the runner captured is never run again.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import torch

from sonnx.errors import BadInputError
from sonnx.runtime.compiled_graphs import CompiledGraph, load_library
from sonnx.runtime.graph_plan_state import GraphPlan
from sonnx.tensor import Tensor

__all__ = ["CapturedRun", "capture_cuda_graph"]


def _whole_graph_for(
    plan: GraphPlan, inputs: dict[str, torch.Tensor]
) -> tuple[CompiledGraph, list[str], list[str], tuple[int, ...]] | None:
    """The graph an earlier run of ``inputs`` (values by name) computed the whole model with
    in ``plan`` (a graph runner's): the graph, the names of its traced inputs (in its order)
    and of the inputs baked into it, and the positions of the model's outputs among the
    graph's. None when no such run was made or some step runs eagerly."""
    if plan.whole is None:
        return None
    segment, positions = plan.whole
    found = plan.chosen_graph(segment, [inputs[n] for n in segment.inputs])
    if found is None:
        return None
    choice, entry = found
    names = [[segment.inputs[i] for i in which] for which in (choice.traced, choice.baked)]
    return entry, names[0], names[1], positions


class CapturedRun:
    """A model's run captured as a CUDA graph for fixed input shapes (see the module's
    docstring); :attr:`replays` counts the runs."""

    def __init__(
        self,
        graph: torch.cuda.CUDAGraph,
        inputs: dict[str, torch.Tensor],
        fixed: dict[str, torch.Tensor],
        outputs: list[torch.Tensor],
        keep: Any,
        held: frozenset[str] = frozenset(),
    ) -> None:
        self._graph = graph
        #: The graph's input buffers by name: a run copies its feeds into them.
        self.inputs = inputs
        #: The inputs whose buffers are the tensors fed at capture (not fed again).
        self.held = held
        #: The inputs baked into the graph at capture, by name (not fed again).
        self.fixed = fixed
        self._outputs = outputs
        self._keep = keep  # the captured library's runner: the graph launches its kernels
        self.replays = 0

    def run(self, feeds: Mapping[str, Tensor | torch.Tensor]) -> list[Tensor]:
        """Copy ``feeds`` (every input of :attr:`inputs` but the :attr:`held` ones, by name)
        into the graph's buffers, replay it and return the model's outputs (the graph's
        buffers, overwritten by the next run)."""
        for name, value in feeds.items():
            data = value.data if isinstance(value, Tensor) else value
            self._check(name, data)
            self.inputs[name].copy_(data)
        missing = [n for n in self.inputs if n not in feeds and n not in self.held]
        if missing:
            raise BadInputError(f"captured run: inputs {missing} are not fed")
        self._graph.replay()
        self.replays += 1
        return [Tensor(data=t, requires_grad=False) for t in self._outputs]

    def _check(self, name: str, data: Any) -> None:
        if name in self.fixed:
            raise BadInputError(
                f"captured run: input {name!r} was baked into the graph at capture "
                f"({self.fixed[name].tolist()}); capture again for another value"
            )
        if name in self.held:
            raise BadInputError(
                f"captured run: input {name!r} is held: the graph reads the tensor given at "
                "capture itself; change that tensor in place instead of feeding it"
            )
        buffer = self.inputs.get(name)
        if buffer is None:
            raise BadInputError(
                f"captured run: no input {name!r}; the inputs are {list(self.inputs)}"
            )
        if not isinstance(data, torch.Tensor) or (data.shape, data.dtype) != (
            buffer.shape,
            buffer.dtype,
        ):
            received = (
                f"{tuple(data.shape)} {data.dtype}"
                if isinstance(data, torch.Tensor)
                else type(data).__name__
            )
            raise BadInputError(
                f"captured run: input {name!r} must be a tensor of shape "
                f"{tuple(buffer.shape)} and dtype {buffer.dtype}, as captured; "
                f"received {received}"
            )


def capture_cuda_graph(
    rep: Any, feeds: Mapping[str, Tensor], held: Collection[str] = ()
) -> CapturedRun:
    """Capture ``rep`` (prepared with ``use_graph=True`` on a CUDA device) as a CUDA graph for
    the shapes of ``feeds`` (every input, as Tensors on the device, by name).

    ``held`` names inputs whose fed tensors become the graph's input buffers as they are
    (contiguous ones), not copies: a replay reads them, and writes those the model writes in
    place (see the module docstring). Runs ``rep`` on ``feeds`` once first (compiling, or
    loading the stored graph), and once more outside the capture, so a model that writes an
    input in place writes it twice then: capture on feeds for which that is harmless (a decode
    step writes the same cache rows again). Raises :class:`~sonnx.errors.BadInputError` when
    the model is not on a CUDA device or not in graph mode, does not compile as one graph, or
    a held input is not one of the graph's fed inputs or not contiguous.
    """
    _check_held(held, feeds)
    device = rep.device.torch_device
    if device.type != "cuda":
        raise BadInputError(
            f"capture_cuda_graph: CUDA graphs need a CUDA device; "
            f"the model is prepared on {rep.device}"
        )
    runner = rep.graph_runner
    if runner is None:
        raise BadInputError("capture_cuda_graph: prepare the model with use_graph=True")
    rep.run(dict(feeds))
    found = _whole_graph_for(runner.plan, {n: t.data for n, t in feeds.items()})
    if found is None:
        eager = "; ".join(f"step {i}: {why}" for i, why in sorted(runner.eager_steps.items()))
        raise BadInputError(
            "capture_cuda_graph: the model does not compile as one graph"
            + (f" (steps run eagerly: {eager})" if eager else "")
        )
    entry, traced, baked, positions = found
    unfed = [n for n in held if n not in traced]
    if unfed:
        raise BadInputError(
            f"capture_cuda_graph: held inputs {unfed} are not fed to the compiled graph (baked "
            f"in, or unused); its fed inputs are {traced}"
        )
    if entry.library is None:
        raise BadInputError(
            "capture_cuda_graph: the compiled graph is not in the graph store (SONNX_CACHE_DIR "
            "is off), and the capture loads its own copy from there"
        )
    inputs = {n: feeds[n].data if n in held else feeds[n].data.clone() for n in traced}
    run = load_library(entry.library, device, runner.library_weights())
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):  # loads the kernels, outside the capture
        run(*inputs.values())
    torch.cuda.synchronize(device)
    graph = torch.cuda.CUDAGraph()
    # "relaxed": the runner queries its previous run's CUDA event as it starts a run, a call
    # the default mode forbids while capturing (the event was recorded before the capture).
    with torch.cuda.graph(graph, capture_error_mode="relaxed"):
        outs = run(*inputs.values())
    fixed = {n: feeds[n].data.clone() for n in baked}
    outputs = [outs[i] for i in positions]
    return CapturedRun(graph, inputs, fixed, outputs, run, held=frozenset(held))


def _check_held(held: Collection[str], feeds: Mapping[str, Tensor]) -> None:
    """Each held input is among the feeds, a contiguous tensor: the graph's kernels then
    address the caller's buffer itself."""
    for name in held:
        if name not in feeds:
            raise BadInputError(
                f"capture_cuda_graph: held input {name!r} is not among the feeds {list(feeds)}"
            )
        if not feeds[name].data.is_contiguous():
            raise BadInputError(
                f"capture_cuda_graph: held input {name!r} must be a contiguous tensor, received "
                f"strides {feeds[name].data.stride()} for shape {tuple(feeds[name].data.shape)}"
            )
