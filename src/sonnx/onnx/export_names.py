"""The names and symbolic dims a user asks ``to_onnx`` for: ``input_names``, ``output_names``
and ``dynamic_axes``, with torch.onnx.export's meaning, checked once before anything is written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import onnx
from onnx import helper

from sonnx import dtypes
from sonnx.errors import ExportError
from sonnx.tensor import Tensor

#: ``{name: {axis: "dim_name"}}`` or ``{name: [axis, ...]}`` (names generated as torch does).
DynamicAxes = Mapping[str, Mapping[int, str] | Sequence[int]]


@dataclass
class GraphNames:
    """Checked ``input_names``, ``output_names`` and ``dynamic_axes`` (axes normalised to
    ``{name: {axis: dim_name}}`` with non-negative axes)."""

    inputs: list[str] | None
    outputs: list[str] | None
    axes: dict[str, dict[int, str]] | None

    @classmethod
    def check(
        cls,
        inputs: Sequence[Tensor],
        outputs: Sequence[Tensor],
        input_names: Sequence[str] | None,
        output_names: Sequence[str] | None,
        dynamic_axes: DynamicAxes | None,
    ) -> GraphNames:
        given_in = _names("input_names", input_names, len(inputs))
        given_out = _names("output_names", output_names, len(outputs))
        if given_in and given_out and set(given_in) & set(given_out):
            raise ExportError(
                f"to_onnx: a name cannot be both an input and an output: "
                f"{sorted(set(given_in) & set(given_out))}"
            )
        if dynamic_axes is None:
            return cls(given_in, given_out, None)
        ranks = {}
        for names, tensors in ((given_in, inputs), (given_out, outputs)):
            for i, t in enumerate(tensors):
                ranks[names[i] if names else (t.name or "")] = t.ndim()
        axes: dict[str, dict[int, str]] = {}
        for name, spec in dynamic_axes.items():
            if name not in ranks:
                raise ExportError(
                    f"to_onnx: dynamic_axes names {name!r}, which is none of the inputs' or "
                    f"outputs' names: {_describe(given_in, given_out, inputs, outputs)}"
                )
            pairs = (
                spec.items()
                if isinstance(spec, Mapping)
                else ((a, f"{name}_dynamic_axes_{k + 1}") for k, a in enumerate(spec))
            )
            axes[name] = {}
            for axis, dim_name in pairs:
                rank = ranks[name]
                if not isinstance(axis, int) or not -rank <= axis < rank:
                    raise ExportError(
                        f"to_onnx: dynamic_axes[{name!r}] has axis {axis!r}; {name!r} has rank "
                        f"{rank}, so axes are in [{-rank}, {rank - 1}]"
                    )
                axes[name][axis % rank] = str(dim_name)
        return cls(given_in, given_out, axes)

    def input_info(
        self,
        name: str,
        t: Tensor,
        declared: onnx.ValueInfoProto | None,
        dynamic_batch: bool,
    ) -> onnx.ValueInfoProto:
        """How graph input ``name`` is declared: an imported graph's own declaration, else
        fixed dims except the dynamic ones asked for (or the batch dim by default)."""
        if declared is not None and (self.axes is None or name not in self.axes):
            declared.name = name
            return declared
        dims: list[int | str] = list(t.shape)
        if self.axes is not None:
            for axis, dim_name in self.axes.get(name, {}).items():
                dims[axis] = dim_name
        elif dynamic_batch and dims:
            dims[0] = "batch"
        return helper.make_tensor_value_info(name, dtypes.torch_to_onnx(t.dtype), dims)

    def name_output_dims(self, model: onnx.ModelProto, outputs: Sequence[Tensor]) -> None:
        """Make the output dims named in ``dynamic_axes`` symbolic (whatever inference said)."""
        if not self.axes:
            return
        for out, t in zip(model.graph.output, outputs, strict=True):
            wanted = self.axes.get(out.name)
            if not wanted:
                continue
            shape = out.type.tensor_type.shape
            if len(shape.dim) != t.ndim():
                shape.ClearField("dim")
                for size in t.shape:
                    shape.dim.add().dim_value = size
            for axis, dim_name in wanted.items():
                shape.dim[axis].Clear()
                shape.dim[axis].dim_param = dim_name


def _names(what: str, names: Sequence[str] | None, count: int) -> list[str] | None:
    if names is None:
        return None
    names = list(names)
    if len(names) != count or not all(isinstance(n, str) and n for n in names):
        raise ExportError(
            f"to_onnx: {what} must be {count} non-empty string(s), one per tensor, received "
            f"{names!r}"
        )
    if len(set(names)) != len(names):
        raise ExportError(f"to_onnx: {what} must be distinct, received {names!r}")
    return names


def _describe(
    given_in: list[str] | None,
    given_out: list[str] | None,
    inputs: Sequence[Tensor],
    outputs: Sequence[Tensor],
) -> str:
    """The names ``dynamic_axes`` may use, input by input and output by output; an unnamed
    tensor is shown by its position, with how to name it."""
    parts, unnamed = [], False
    for kind, names, tensors in (("inputs", given_in, inputs), ("outputs", given_out, outputs)):
        shown = []
        for i, t in enumerate(tensors):
            name = names[i] if names else t.name
            unnamed = unnamed or not name
            shown.append(repr(name) if name else f"{kind}[{i}] (unnamed)")
        parts.append(f"{kind} [{', '.join(shown)}]")
    hint = "; name a tensor with input_names or output_names to give it dynamic axes"
    return ", ".join(parts) + (hint if unnamed else "")
