"""Graph-mode runs of plain NumPy arrays (a list in input order, or a dict by name): the way a
server or a streaming loop feeds a model, at the cost of the compiled library and little else.

A general graph-mode run binds each input as a :class:`~sonnx.tensor.Tensor` (checking its
type and sizes against the model's declaration), reads five layout facts of each (dtype,
device, sizes, strides, offset) and looks up the graph chosen for them. For C-ordered,
writable arrays of the declared number types, all of that follows from the arrays'
sizes and strides, which NumPy hands out as ready-made tuples: one dictionary lookup finds the
choice the general path made for arrays like these before, and the run is ``torch.from_numpy``
per array, the compiled library and the recording of the outputs. On a streaming voice model
whose library takes ~0.1 ms, the general path's bookkeeping cost about as much again.

Anything else (a first shape, other types, a strided array, a changed weight) returns None,
and :meth:`SingaRep.run <sonnx.runtime.rep.SingaRep.run>` takes the general path, which
owns every check and error message; after it, :meth:`ArrayRuns.remember` keeps its choice.
A run that lets caches be written in place (:data:`~sonnx.run_state.CACHES_IN_PLACE`) always
takes the general path: a user's arrays are never given to a graph that writes into them.

An :class:`ArrayRuns` is a view of the runner's plan (:mod:`sonnx.runtime.graph_plan_state`):
it remembers only where in a plan the choice for such arrays is kept (the whole graph's
segment and the inputs' signature), and looks it up in the plan of the moment at each run, so
a replan or a changed weight in another thread is seen at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from sonnx.run_state import CACHES_IN_PLACE
from sonnx.runtime.compiled_graphs import CompiledRunError
from sonnx.runtime.graph_keys import RECENT_SIGNATURES, signature
from sonnx.runtime.graph_mode import GraphRunner
from sonnx.runtime.graph_plan_state import Bounds, bounds_of
from sonnx.runtime.run_paths import WHOLE_GRAPH_RUN, RunTaken
from sonnx.tensor import Tensor, computed_tensor


def is_plain_array(a: Any, dtype: np.dtype | None) -> bool:
    """Whether ``a`` is a C-ordered, writable NumPy array of ``dtype``: one that
    ``torch.from_numpy`` takes as it is, in the layout its shape and strides say."""
    if type(a) is not np.ndarray or a.dtype != dtype:
        return False
    flags = a.flags
    return flags.c_contiguous and flags.writeable


class ArrayRuns:
    """The compiled runs of one model for plain arrays (a list or a dict), by their sizes and
    strides. ``names`` and ``dtypes`` are the model's inputs in order, with the NumPy type
    each takes as it is (None: none does)."""

    def __init__(
        self, runner: GraphRunner, names: Sequence[str], dtypes: Sequence[np.dtype | None]
    ) -> None:
        self.runner = runner
        self.names = list(names)
        self.dtypes = list(dtypes)
        #: For each key (see :meth:`_key`), where the runner's plan keeps its choice for
        #: such arrays (the whole graph's segment and its inputs' signature), the positions
        #: of the segment's inputs among the arrays and those of the graph's outputs among
        #: the segment's outputs.
        self._choices: dict[
            tuple[Any, ...], tuple[Bounds, tuple[Any, ...], list[int], tuple[int, ...]]
        ] = {}

    def run(
        self, given: list[Any] | dict[str, Any]
    ) -> tuple[dict[str, Tensor], list[torch.Tensor], RunTaken] | None:
        """A compiled run of ``given`` (one array per input, in order or by name), if the
        runner's plan holds a graph for such arrays.

        :param given: the arrays.
        :returns: the inputs as bound, the outputs' values and the path taken (the whole
            graph's); None when the general path must run them.
        """
        arrays = self._in_order(given)
        key = self._key(arrays)
        if key is None:
            return None
        self.runner.current_versions()  # a changed weight: a plan without the old choices
        found = self._choices.get(key)
        if found is None:
            return None
        bounds, layouts, inputs, outputs = found
        plan = self.runner.plan
        choice = plan.choice(bounds, layouts) if plan.whole is not None else None
        if choice is None:
            return None
        # A baked value as the general path's key has it (``graph_keys.baked_values``): the
        # elements in order, as Python numbers, read here from NumPy (a tenth of torch's cost).
        baked = tuple(tuple(arrays[inputs[i]].ravel().tolist()) for i in choice.baked)
        entry = choice.graphs.get(baked)
        if entry is None:
            return None
        datas = [torch.from_numpy(a) for a in arrays]
        try:
            outs = entry.compute(*[datas[inputs[i]] for i in choice.traced])
        except CompiledRunError:  # the general path runs the steps eagerly, and says why
            return None
        bound = {n: computed_tensor(d) for n, d in zip(self.names, datas, strict=True)}
        return bound, [outs[i] for i in outputs], WHOLE_GRAPH_RUN

    def remember(self, given: list[Any] | dict[str, Any], bound: dict[str, Tensor]) -> None:
        """Keep where the runner's plan holds the choice the general path made for ``given``,
        bound as ``bound``, if they are plain arrays bound as they are and the runner compiled
        the whole graph.

        :param given: the arrays, as :meth:`run` got them.
        :param bound: the inputs as the general path bound them.
        """
        arrays = self._in_order(given)
        key = self._key(arrays)
        plan = self.runner.plan
        if key is None or plan.whole is None:
            return
        segment, outputs = plan.whole
        for name, a in zip(self.names, arrays, strict=True):
            data = bound[name].data
            if data.data_ptr() != a.ctypes.data or tuple(data.shape) != a.shape:
                return  # bound otherwise than as the array itself (a scalar reshaped)
        layouts = signature([bound[n].data for n in segment.inputs])
        if plan.choice(bounds_of(segment), layouts) is None:
            return
        if len(self._choices) >= RECENT_SIGNATURES:
            self._choices.clear()
        inputs = [self.names.index(n) for n in segment.inputs]
        self._choices[key] = (bounds_of(segment), layouts, inputs, outputs)

    def _in_order(self, given: list[Any] | dict[str, Any]) -> list[Any] | None:
        """One value per input in the inputs' order, if ``given`` names exactly the inputs
        or lists as many values; None otherwise."""
        if len(given) != len(self.names):
            return None
        if type(given) is dict:
            return [given.get(n) for n in self.names]
        return given

    def _key(self, arrays: list[Any] | None) -> tuple[Any, ...] | None:
        """The arrays' sizes and strides, if each is a C-ordered writable NumPy array of its
        input's declared type; None otherwise."""
        if arrays is None or CACHES_IN_PLACE.get():
            return None
        if not all(map(is_plain_array, arrays, self.dtypes)):
            return None
        return (*[a.shape for a in arrays], *[a.strides for a in arrays])
