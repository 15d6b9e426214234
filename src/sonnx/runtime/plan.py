"""A graph program lowered to one generated Python function: its *plan*.

The step loop of :class:`~sonnx.runtime.runner.ProgramRunner` walks the run's schedule
(:mod:`sonnx.runtime.schedule`: the program's steps the run takes, each of its kind, and which
values to free after each) and, for every node on every run, finds its inputs in a dict of
names and wraps every result in a :class:`~sonnx.tensor.Tensor` and names it. A plan walks the
same schedule once and writes it down as straight-line Python source, as torch.fx does for its
graphs: a line per node calling the node's operator on local variables that hold torch tensors,
``del`` after a value's last reader, and Tensors made only for the values the caller keeps and
the steps that take Tensors. A node then costs its operator's ``forward`` and little else; a
shape value or folded result that no later step reads (an int8 table's Cast read only by a
shape value) is pruned from the plan's schedule. Every other step (a converter, a folded step,
subgraphs, a fused step and its fallback) is a line calling the runner's own
:meth:`~sonnx.runtime.runner.ProgramRunner.run_node` or
:meth:`~sonnx.runtime.runner.ProgramRunner.run_fused`, as the step loop does: the plan decides
nothing about running a node that the step loop decides too.

A plan covers the run a model is called for most: every step, no intermediate value asked for,
an input signature whose shape values an earlier run found (see
:mod:`sonnx.runtime.shape_values`); and each range of steps graph mode runs eagerly between its
compiled segments, keeping what later steps read (its shape values found by the range's own
first run of the signature: :meth:`ProgramRunner.execute_range`). The step loop stays the
reference for the rest (a first run, ``last_layers`` cuts, ``SONNX_DEBUG`` traces) and for
errors: when a plan raises, the step loop runs again and names the node that fails (see
:meth:`ProgramRunner.execute`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache
from typing import TYPE_CHECKING, Any

import torch

from sonnx.engine.host_values import call_placed
from sonnx.engine.operator import Operator
from sonnx.onnx.registry import node_schema
from sonnx.runtime.steps import FusedStep, Step, StepKind, named, output_values, plain
from sonnx.strings import StringArray
from sonnx.tensor import Tensor

if TYPE_CHECKING:
    from sonnx.runtime.program import GraphProgram

__all__ = ["PlanAssumptionError", "build_plan"]

#: A plan's run: ``run(values, known)`` reads the graph's inputs and constants from ``values``
#: and the input signature's shape values from ``known``, and adds the kept outputs to
#: ``values``.
Plan = Callable[[dict[str, Any], dict[str, Any]], None]

# How a local variable of the plan holds its value.
_RAW = "raw"  # what an operator's forward returned: a torch tensor or a StringArray
_TENSOR = "tensor"  # a sonnx Tensor
_ANY = "any"  # whatever the step loop would hold: a Tensor, a sequence, an optional, ...


class PlanAssumptionError(Exception):
    """A step left out an output that a later step reads (the step loop says which), or a
    name from the enclosing scope holds no tensor in this run."""


def build_plan(
    program: GraphProgram,
    keep: frozenset[str],
    values: dict[str, Any] | None = None,
    bounds: tuple[int, int] | None = None,
) -> Plan:
    """The plan of a whole run of ``program`` (or of its steps ``[start, stop)`` = ``bounds``,
    an eager range of graph mode) that keeps the values named ``keep``.

    ``values`` are those of the run the plan is built for: a subgraph's names from its
    enclosing scope (or a range's, from the steps before it) that hold tensors there are taken
    as tensors (operators then get them directly), with a check at each run that sends a run
    where one is not back to the step loop.

    :param program: the program.
    :param keep: the names the run hands back in ``values``.
    :param values: the values of the run it is built for.
    :param bounds: the range of steps, or None for all.
    :returns: the plan.
    """
    return _PlanWriter(program, keep, values or {}, bounds).write()


class _PlanWriter:
    """Writes the source of one plan, step by step, and compiles it."""

    def __init__(
        self,
        program: GraphProgram,
        keep: frozenset[str],
        values: dict[str, Any],
        bounds: tuple[int, int] | None,
    ) -> None:
        self.program = program
        self.keep = keep
        self.bounds = bounds or (0, len(program.steps))
        own = program.constants.keys() | set(program.input_names)
        self.outer_tensors = {n for n, v in values.items() if type(v) is Tensor and n not in own}
        self.on_cpu = program.device.torch_device.type == "cpu"
        # (lines, names read, names freed after it): one block per scheduled step
        self.blocks: list[tuple[list[str], tuple[str, ...]]] = []
        self.last_reads: dict[str, int] = {}  # graph name -> the last block reading it
        self.var: dict[str, str] = {}  # graph name -> local variable
        self.form: dict[str, str] = {}
        self.produced: list[str] = []
        self.defined_in: dict[str, int] = {}  # graph name -> index of the block defining it
        self.maybe_none: set[str] = set()  # outputs a step may leave unproduced
        self.namespace: dict[str, Any] = {
            "_box": plain,
            "_first_raw": _first_raw,
            "_outputs": _outputs,
            "_keep": _keep,
            "_Tensor": torch.Tensor,
            "_SonnxTensor": Tensor,
            "_run": program.runner.run_node,
            "_run_fused": program.runner.run_fused,
            "_raw_all": _raw_all,
            "_on_one_device": _on_one_device,
            "PlanAssumptionError": PlanAssumptionError,
        }

    def write(self) -> Plan:
        program = self.program
        schedule = program.runner.schedule(*self.bounds, keep=self.keep, prune=True)
        self.last_reads = schedule.last_reads  # a block per entry: the same positions
        for entry in schedule.steps:
            index, step = entry.index, entry.step
            lines: list[str] = []
            if type(step) is FusedStep:
                self._fused(index, step, lines)
            elif step.kind is StepKind.SHAPE_VALUE:
                form = _TENSOR if self._gives_tensors(step) else _ANY
                for name in step.outputs:
                    if name:  # absent where the step loop's run did not produce it
                        lines.append(f"{self._define(name, form)} = known.get({name!r})")
                        self.maybe_none.add(name)
            else:
                self._call(index, step, list(entry.reads), lines)
            self.blocks.append((lines, entry.frees))
        return self._compile()

    # ---- one step ----------------------------------------------------------------------------
    def _fused(self, index: int, fused: FusedStep, lines: list[str]) -> None:
        """Lines running a fused step as the step loop does (the runner's ``run_fused``: its
        call, or its fallback where the call declines), on its inputs as the plan holds them."""
        self.namespace[f"_fused{index}"] = fused
        args = ", ".join(self._load(n, lines) for n in fused.inputs)
        made = f"_run_fused(_fused{index}, [{args}])"
        if fused.fusion.outputs:  # several results, one per name
            targets = ", ".join(self._define(n, _RAW) for n in fused.fusion.outputs)
            lines.append(f"{targets}, = _raw_all({made})")
            return
        target = self._define(self.program.steps[fused.index].outputs[0], _RAW)
        lines.append(f"{target} = {made}")
        lines.append(f"if isinstance({target}, _SonnxTensor): {target} = {target}.data")

    def _call(self, index: int, step: Step, reads: list[str], lines: list[str]) -> None:
        """Lines running ``step``: its operator's forward on raw tensors when it has one and
        every input is surely a tensor, else the step loop's own ``run_step`` on values."""
        direct = self._takes_tensors(step) and step.kind is StepKind.RUN and not step.has_subgraphs
        if direct:
            self.namespace[f"_op{index}"] = step.op.forward if self.on_cpu else step.op
            args = ", ".join(self._raw_arg(n, lines) if n else "None" for n in step.inputs)
            call = f"_op{index}({args})" if self.on_cpu else f"_on_one_device(_op{index}, {args})"
            self._assign(step, call, _RAW, lines)
            return
        args = ", ".join(self._boxed_arg(n, lines) if n else "None" for n in step.inputs)
        scope = "{}"
        if step.has_subgraphs:
            outer = dict.fromkeys(reads)
            scope = "{" + ", ".join(f"{n!r}: {self._boxed_arg(n, lines)}" for n in outer) + "}"
        form = _TENSOR if self._gives_tensors(step) else _ANY
        self.namespace[f"_step{index}"] = step
        self._assign(step, f"_run({index}, _step{index}, [{args}], {scope})", form, lines)

    def _assign(self, step: Step, call: str, form: str, lines: list[str]) -> None:
        names = step.outputs
        if form == _RAW and len(names) == 1:
            target = self._define(names[0], form)
            lines.append(f"{target} = {call}")
            lines.append(f"if type({target}) is not _Tensor: {target} = _first_raw({target})")
            return
        targets = [self._define(n, form) if n else "_" for n in names]
        self.maybe_none.update(n for n in names if n)
        lines.append(f"{', '.join(targets)}, = _outputs({call}, {len(names)}, {form == _RAW})")

    # ---- values --------------------------------------------------------------------------
    def _takes_tensors(self, step: Step) -> bool:
        """Whether the step loop would call ``step``'s operator on tensors (then its outputs
        are tensors too)."""
        return step.op is not None and all(not n or self._is_tensor(n) for n in step.inputs)

    def _gives_tensors(self, step: Step) -> bool:
        """Whether ``step``'s outputs are surely tensors: its operator runs on tensors, or its
        schema allows only tensors there, or it is an Identity of a tensor."""
        if self._takes_tensors(step):
            return True
        if step.info.op_type == "Identity" and step.info.domain == "":
            return self._is_tensor(step.inputs[0])
        return _tensor_only_outputs(step.info.op_type, step.info.opset, step.info.domain)

    def _define(self, name: str, form: str) -> str:
        self.var[name] = f"v{len(self.var)}"
        self.form[name] = form
        self.produced.append(name)
        self.defined_in[name] = len(self.blocks)
        return self.var[name]

    def _is_tensor(self, name: str) -> bool:
        if name in self.var:
            return self.form[name] != _ANY
        # Constants are Tensors, and so are the inputs of a run with an input signature; the
        # names a subgraph reads from its enclosing scope may be sequences (checked per run).
        return (
            name in self.program.constants
            or name in self.program.input_names
            or name in self.outer_tensors
        )

    def _load(self, name: str, lines: list[str]) -> str:
        """The variable holding ``name``, loading it from ``values`` at its first reader."""
        if name not in self.var:
            self.form[name] = _TENSOR if self._is_tensor(name) else _ANY
            var = self.var[name] = f"v{len(self.var)}"
            lines.append(f"{var} = values[{name!r}]")
            if name in self.outer_tensors:  # a tensor when the plan was built: still one?
                lines.append(f"if type({var}) is not _SonnxTensor: raise PlanAssumptionError()")
        return self.var[name]

    def _raw_arg(self, name: str, lines: list[str]) -> str:
        var = self._load(name, lines)
        return var if self.form[name] == _RAW else f"{var}.data"

    def _boxed_arg(self, name: str, lines: list[str]) -> str:
        var = self._load(name, lines)
        return f"_box({var})" if self.form[name] == _RAW else var

    # ---- the function --------------------------------------------------------------------
    def _compile(self) -> Plan:
        checked: list[list[str]] = [[] for _ in self.blocks]  # may be None, read later
        for name in self.maybe_none:
            if self.last_reads.get(name, -1) > self.defined_in[name]:
                checked[self.defined_in[name]].append(self.var[name])
        freed = [{self.var[n] for n in frees if n in self.var} for _, frees in self.blocks]
        source = ["def plan(values, known):"]
        for i, (lines, _) in enumerate(self.blocks):
            source.extend(f"    {line}" for line in lines)
            for var in checked[i]:  # the step loop finds no value for the later reader
                source.append(f"    if {var} is None: raise PlanAssumptionError()")
            if freed[i]:
                source.append(f"    del {', '.join(sorted(freed[i]))}")
        for name in self.produced:
            if name in self.keep:
                source.append(f"    _keep(values, {name!r}, {self.var[name]})")
        source.append("    return None")
        code = compile("\n".join(source), f"<sonnx plan of {len(self.blocks)} steps>", "exec")
        exec(code, self.namespace)
        plan: Plan = self.namespace["plan"]
        plan.source = "\n".join(source)  # type: ignore[attr-defined]
        return plan


@cache
def _tensor_only_outputs(op_type: str, opset: int, domain: str) -> bool:
    """Whether the operator's schema allows only tensors in every output (not sequences,
    optionals or maps); False for operators without a schema."""
    schema = node_schema(op_type, opset, domain)
    if schema is None:
        return False
    allowed = {c.type_param_str: c.allowed_type_strs for c in schema.type_constraints}
    return all(
        all(t.startswith("tensor(") for t in allowed.get(o.type_str, [o.type_str]))
        for o in schema.outputs
    )


# ---- what the generated lines call ---------------------------------------------------------
def _first_raw(result: Any) -> Any:
    """The first output of an operator that returned several for a one-output node."""
    if isinstance(result, (torch.Tensor, StringArray)):
        return result
    return result[0]


def _raw_all(results: Sequence[Any]) -> list[Any]:
    """A group's results as raw tensors (the fused call's, or its steps' Tensors)."""
    return [r.data if isinstance(r, Tensor) else r for r in results]


def _outputs(result: Any, count: int, raw: bool) -> tuple[Any, ...]:
    """A step's ``count`` outputs, None for those it did not produce (as the step loop reads
    them: one value or a tuple of values)."""
    if raw:
        outs = (result,) if isinstance(result, (torch.Tensor, StringArray)) else tuple(result)
    else:
        outs = tuple(output_values(result))
    return (outs + (None,) * count)[:count]


def _keep(values: dict[str, Any], name: str, value: Any) -> None:
    """Hand a kept value back as the step loop would: a named Tensor (absent if None)."""
    if value is None:
        return
    if isinstance(value, (torch.Tensor, StringArray)):
        value = plain(value)
    values[name] = named(value, name)


def _on_one_device(op: Operator, *raw: torch.Tensor | None) -> Any:
    """``op.forward`` after copying host values to the device of the others (off the CPU)."""
    return call_placed(op.op_type, op.forward, list(raw))
