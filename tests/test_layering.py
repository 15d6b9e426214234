"""The source tree's layers: a module imports only its own layer and the layers below it.

From the top: the application (SINGA's modules ``autograd``, ``layer``, ``model``, ``opt``, the
server, the CLI) -> ``runtime`` (the program, its passes and executors) -> ``onnx`` (load,
registry and converters, export) -> ``operators`` (one class per ONNX operator, by family) ->
``engine`` (the operator contract, backward, tracing) -> ``proto`` (ONNX's vocabulary: schema
attributes, node and tensor writing) -> the base (tensor, dtypes, device, errors, ...).

Imports under ``if TYPE_CHECKING:`` are annotations only and are not counted. The few imports
that go upward are listed in ``UPWARD`` with their reason; each must stay inside a function (so
importing the lower module never pulls in the upper one), and a listed import that no longer
exists fails the test, so the list cannot go stale.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

#: The layers, bottom first; a module's layer is that of its first two name parts.
LAYERS: list[tuple[str, set[str]]] = [
    (
        "base",
        {
            "sonnx.errors",
            "sonnx.dtypes",
            "sonnx.dims",
            "sonnx.device",
            "sonnx.run_state",
            "sonnx.host_arrays",
            "sonnx.host_memory",
            "sonnx.strings",
            "sonnx.symbolic_sizes",
            "sonnx.tensor",
            "sonnx.compiler_warnings",
            "sonnx.caller_warnings",
            "sonnx.precision",
            "sonnx.process_tuning",
        },
    ),
    ("proto", {"sonnx.proto"}),
    ("engine", {"sonnx.engine"}),
    ("operators", {"sonnx.operators"}),
    ("onnx", {"sonnx.onnx"}),
    # generation is the decode loop over a program: SingaRep.generate is its entry point
    ("runtime", {"sonnx.runtime", "sonnx.generation"}),
]
APPLICATION = len(LAYERS)

#: (importer, imported module prefix) -> why this import goes upward.
UPWARD = {
    ("sonnx.tensor.core", "sonnx.operators"): (
        "SINGA's Tensor arithmetic (t + u, t @ u, t.reshape) records operators"
    ),
}


@dataclass(frozen=True)
class Import:
    module: str
    target: str
    line: int
    in_function: bool


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(path: Path) -> list[Import]:
    """Every sonnx import of one file, outside ``if TYPE_CHECKING:`` blocks."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    return _source_imports(path.read_text(), module, package)


def _source_imports(source: str, module: str, package: str) -> list[Import]:
    """Every sonnx import of ``source`` (module ``module`` in ``package``), outside
    ``if TYPE_CHECKING:`` blocks."""
    found: list[Import] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for other in child.orelse:
                    visit(other, in_function)
                continue
            inside = in_function or isinstance(
                child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
            )
            if isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                for alias in child.names:
                    if base.startswith("sonnx"):
                        found.append(Import(module, f"{base}.{alias.name}", child.lineno, inside))
            elif isinstance(child, ast.Import):
                for alias in child.names:
                    if alias.name.startswith("sonnx"):
                        found.append(Import(module, alias.name, child.lineno, inside))
            visit(child, inside)

    visit(ast.parse(source), False)
    return found


def _layer(name: str) -> int:
    for index, (_, prefixes) in enumerate(LAYERS):
        if any(name == p or name.startswith(p + ".") for p in prefixes):
            return index
    return APPLICATION


def _layer_name(index: int) -> str:
    return LAYERS[index][0] if index < APPLICATION else "application"


def _upward_reason(item: Import) -> str | None:
    for (importer, prefix), reason in UPWARD.items():
        if item.module == importer and (item.target == prefix or item.target.startswith(prefix)):
            return reason
    return None


ALL_IMPORTS = [i for path in sorted(SRC.rglob("*.py")) for i in _imports(path)]


def test_every_import_goes_down_the_layers() -> None:
    wrong = []
    for item in ALL_IMPORTS:
        here, there = _layer(item.module), _layer(item.target)
        if there <= here:
            continue
        reason = _upward_reason(item)
        if reason is None:
            wrong.append(
                f"{item.module}:{item.line} ({_layer_name(here)}) imports {item.target} "
                f"({_layer_name(there)})"
            )
        elif not item.in_function:
            wrong.append(
                f"{item.module}:{item.line} imports {item.target} at module level; the listed "
                f"upward import ({reason}) must stay inside a function"
            )
    assert not wrong, "imports that break the layering:\n" + "\n".join(wrong)


@pytest.mark.parametrize(("importer", "prefix"), sorted(UPWARD))
def test_each_listed_upward_import_still_exists(importer: str, prefix: str) -> None:
    assert any(i.module == importer and i.target.startswith(prefix) for i in ALL_IMPORTS), (
        f"{importer} no longer imports {prefix}: remove it from UPWARD"
    )


#: (importer prefix, imported prefix) that no import may join, not even inside a function or
#: through UPWARD: ``onnx`` loads, registers, adapts versions and exports, and executes
#: nothing (subgraphs run through :mod:`sonnx.engine.subgraphs`, which ``runtime``
#: implements); ``operators`` know neither the file format nor the runtime.
NEVER = [
    ("sonnx.onnx", "sonnx.runtime"),
    ("sonnx.onnx", "sonnx.generation"),
    ("sonnx.operators", "sonnx.onnx"),
    ("sonnx.operators", "sonnx.runtime"),
    ("sonnx.operators", "sonnx.generation"),
]


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _never_allowed(imports: list[Import]) -> list[str]:
    return [
        f"{i.module}:{i.line} imports {i.target}"
        for i in imports
        for low, high in NEVER
        if _within(i.module, low) and _within(i.target, high)
    ]


def test_onnx_executes_nothing_and_operators_know_neither_onnx_nor_runtime() -> None:
    wrong = _never_allowed(ALL_IMPORTS)
    assert not wrong, "imports that must never exist:\n" + "\n".join(wrong)


def test_a_hidden_import_of_the_runtime_is_caught() -> None:
    """Inside a function, or from a package's ``__init__``, the check still sees it."""
    source = "def run():\n    from sonnx.runtime.program import GraphProgram\n"
    found = _source_imports(source, "sonnx.onnx.converters.fake", "sonnx.onnx.converters")
    assert _never_allowed(found) == [
        "sonnx.onnx.converters.fake:2 imports sonnx.runtime.program.GraphProgram"
    ]
    relative = _source_imports(
        "from ..onnx import registry\n", "sonnx.operators", "sonnx.operators"
    )
    assert _never_allowed(relative) == ["sonnx.operators:1 imports sonnx.onnx.registry"]


def _package_cycles() -> list[list[str]]:
    """Cycles among a package's own modules through module-level imports (``__init__``
    re-exports aside: a package gathering its modules is not a circle)."""
    edges: dict[str, set[str]] = {}
    modules = {_module_name(p) for p in SRC.rglob("*.py")}
    for item in ALL_IMPORTS:
        if item.in_function:
            continue
        target = item.target if item.target in modules else item.target.rpartition(".")[0]
        package = item.module.rpartition(".")[0]
        if (
            target in modules
            and target.rpartition(".")[0] == package
            and target != item.module
            and not (SRC / target.replace(".", "/")).is_dir()
        ):
            edges.setdefault(item.module, set()).add(target)
    cycles, state = [], {}

    def walk(node: str, stack: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                cycles.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                walk(nxt, [*stack, nxt])
        state[node] = "done"

    for start in sorted(edges):
        if start not in state:
            walk(start, [start])
    return cycles


def test_no_import_circle_inside_a_package() -> None:
    cycles = _package_cycles()
    assert not cycles, "import circles:\n" + "\n".join(" -> ".join(c) for c in cycles)
