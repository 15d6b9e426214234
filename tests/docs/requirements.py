"""What a documentation block needs installed, and what its section's install line installs.

**Needs.** A python block needs the distributions of the modules it imports and, for each
part of sonnx it uses (``sonnx.prepare``, ``from sonnx import lora``, ``sonnx.serve.config``),
what that part of sonnx imports: the eager imports of every sonnx module that gets imported,
and every import, lazy ones too, of the *subsystem* the used object lives in (``sonnx.serve``,
``sonnx.lora``, ``sonnx.walkthrough``: the first level under ``sonnx``), since calling into a
subsystem may reach any of its function-level imports. A shell block's ``sonnx COMMAND`` needs
what the command's handler imports; ``python -c CODE`` and ``python FILE.py`` what the code
does; any other program installed as a console script, its distribution. Imports guarded by
``if TYPE_CHECKING:`` or by a ``try`` that catches ``ImportError`` are optional and left out.

A module maps to its distribution through ``importlib.metadata.packages_distributions()``; a
submodule named as one of its distribution's extras (``tritonclient.http``) needs what that
extra adds (``tritonclient[http]``: geventhttpclient, ...).

**Installs.** An install line is an inline ``pip install ...`` span in a page's prose
(``pip install ".[serve]" "tritonclient[http]"``). It holds for the rest of its section and
that section's subsections, until the next install line there; a block with none above it
gets ``pip install .``. What a line installs is the closure of its requirements: sonnx's own
(``.`` or ``sonnx``, with extras, from this checkout's ``pyproject.toml``), then the installed
distributions' ``requires()``, markers evaluated, extras followed.
"""

from __future__ import annotations

import argparse
import ast
import functools
import importlib
import importlib.metadata as metadata
import inspect
import re
import shlex
import sys
import textwrap
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.docs.pages import PYTHON, ROOT, SHELL, Fence, command_lines

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pytest's own dependency tomli reads the file
    import tomli as tomllib

STDLIB = frozenset(sys.stdlib_module_names)
SRC = ROOT / "src"
#: The installer the install lines themselves use.
INSTALLERS = frozenset({"pip", "pip3"})
SHELL_OPERATORS = frozenset({"&&", "||", "|", ";", "&"})
REDIRECTIONS = frozenset({">", ">>", "<", "&>", ">&"})
INSTALL_LINE = re.compile(r"`(pip install [^`]+)`")
HEADING = re.compile(r"^(#{1,6})\s")
SONNX_TARGET = re.compile(r"^(?:\.|sonnx)(?:\[(?P<extras>[^\]]*)\])?$")


@dataclass(frozen=True)
class Need:
    """A distribution (canonical names: any one of ``dists``, as for a namespace package
    several provide), with an extra of it where one is needed; ``where`` the block (page:line)
    and ``what`` in it needs it."""

    dists: frozenset[str]
    extra: str | None
    where: str
    what: str


# -- imports in Python source ---------------------------------------------------------------


def _catches_import_error(node: ast.Try) -> bool:
    caught = " ".join(ast.unparse(h.type) for h in node.handlers if h.type is not None)
    return "ImportError" in caught or "ModuleNotFoundError" in caught


def imports(tree: ast.AST) -> tuple[set[str], set[str]]:
    """(eager, lazy): the absolute modules a module's code imports at import time and inside
    functions; ``from a import b`` gives ``a.b`` (``b`` may be a submodule) and ``a``."""
    eager: set[str] = set()
    lazy: set[str] = set()

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Try) and _catches_import_error(child):
                continue
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            into = lazy if in_function else eager
            if isinstance(child, ast.Import):
                into.update(alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                into.add(child.module)
                into.update(f"{child.module}.{alias.name}" for alias in child.names)
            function = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            visit(child, in_function or function)

    visit(tree, False)
    return eager, lazy


def _is_sonnx(module: str) -> bool:
    return module == "sonnx" or module.startswith("sonnx.")


def _third_party(modules: Iterable[str]) -> set[str]:
    return {m for m in modules if not _is_sonnx(m) and m.split(".")[0] not in STDLIB}


# -- sonnx's own modules --------------------------------------------------------------------


@functools.cache
def _sonnx_imports() -> dict[str, tuple[set[str], set[str]]]:
    """Every sonnx module of this checkout, with its (eager, lazy) imports."""
    found = {}
    for path in SRC.joinpath("sonnx").rglob("*.py"):
        parts = path.relative_to(SRC).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[module] = imports(ast.parse(path.read_text(encoding="utf-8")))
    return found


def _with_packages(module: str) -> list[str]:
    """``a.b.c`` and the packages importing it runs: ``a``, ``a.b``."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def eager_closure(modules: Iterable[str]) -> set[str]:
    """The third-party modules that importing ``modules`` (sonnx's) imports."""
    graph = _sonnx_imports()
    seen: set[str] = set()
    todo = [m for module in modules for m in _with_packages(module)]
    while todo:
        module = todo.pop()
        if module in graph and module not in seen:
            seen.add(module)
            todo.extend(m for name in graph[module][0] for m in _with_packages(name))
    return _third_party(name for module in seen for name in graph[module][0])


def subsystem_needs(module: str) -> set[str]:
    """The third-party modules that using sonnx's ``module`` may import: its subsystem's
    imports, lazy ones included, and what importing the sonnx modules they name imports."""
    if module == "sonnx":
        return eager_closure(["sonnx"])
    subsystem = ".".join(module.split(".")[:2])
    graph = _sonnx_imports()
    members = [m for m in graph if m == subsystem or m.startswith(subsystem + ".")]
    named = {name for m in members for name in graph[m][0] | graph[m][1]}
    return _third_party(named) | eager_closure([*members, *filter(_is_sonnx, named)])


def home(path: str) -> str:
    """The sonnx module that defines what the dotted ``path`` names, as a user reaches it:
    ``sonnx.prepare`` is defined in ``sonnx.runtime.rep``, ``sonnx.lora`` is a package."""
    parts = path.split(".")
    obj: Any = importlib.import_module("sonnx")
    found = "sonnx"
    for i in range(1, len(parts)):
        if hasattr(obj, parts[i]):
            obj = getattr(obj, parts[i])
        else:
            try:
                obj = importlib.import_module(".".join(parts[: i + 1]))
            except ImportError:
                break
        defined_in = obj.__name__ if inspect.ismodule(obj) else getattr(obj, "__module__", None)
        if not isinstance(defined_in, str) or not _is_sonnx(defined_in):
            break  # a value (a flag, a constant): the module holding it is the home
        found = defined_in
    return found


def _dotted(node: ast.AST) -> list[str] | None:
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return [*inner, node.attr] if inner else None
    return None


def sonnx_references(tree: ast.AST) -> set[str]:
    """The dotted sonnx paths the code names: what it imports from sonnx, and the attribute
    chains on the names those imports bind (``sonnx.prepare``, ``lora.export``)."""
    bound: dict[str, str] = {}
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _is_sonnx(alias.name):
                    local = alias.asname or alias.name.split(".")[0]
                    bound[local] = alias.name if alias.asname else local
                    found.add(alias.name)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and _is_sonnx(node.module or ""):
            for alias in node.names:
                bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
                found.add(f"{node.module}.{alias.name}")
    for node in ast.walk(tree):
        chain = _dotted(node) if isinstance(node, ast.Attribute) else None
        if chain and chain[0] in bound:
            found.add(".".join([bound[chain[0]], *chain[1:]]))
    return found


def code_needs(code: str) -> set[str]:
    """The third-party modules that running Python ``code`` imports or may import."""
    tree = ast.parse(code)
    eager, lazy = imports(tree)
    named = eager | lazy
    homes = {home(path) for path in sonnx_references(tree)}
    needs = _third_party(named) | eager_closure(filter(_is_sonnx, named))
    return needs.union(*(subsystem_needs(module) for module in homes))


# -- shell commands -------------------------------------------------------------------------


def _simple_commands(line: str) -> list[list[str]]:
    """A shell line's simple commands, without redirections and leading ``VAR=value``s."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    found: list[list[str]] = [[]]
    redirected = False
    for token in lexer:
        if token in SHELL_OPERATORS:
            found.append([])
        elif token in REDIRECTIONS:
            redirected = True
        elif redirected:
            redirected = False
        elif found[-1] or not re.match(r"^\w+=", token):
            found[-1].append(token)
    return [argv for argv in found if argv]


def _subcommand_handler(parser: argparse.ArgumentParser, name: str) -> Any:
    for action in parser._actions:  # argparse keeps subcommands only here
        if isinstance(action, argparse._SubParsersAction) and name in action.choices:
            return action.choices[name].get_default("func")
    return None


def sonnx_command_needs(args: list[str]) -> set[str]:
    """``sonnx ARGS``: importing the CLI, then what the command's handler runs. The CLI's own
    handlers import what they run inside their bodies, so those bodies say what a command needs
    (not every command's, as the whole ``sonnx.cli`` would); a handler defined elsewhere
    (``generate``'s) needs its subsystem."""
    from sonnx import cli

    needs = eager_closure(["sonnx.cli"])
    handler = _subcommand_handler(cli.build_parser(), args[0]) if args else None
    if handler is None:  # --version, --help
        return needs
    if handler.__module__ != cli.__name__:
        needs |= subsystem_needs(handler.__module__)
    return needs | code_needs(textwrap.dedent(inspect.getsource(handler)))


@functools.cache
def console_scripts() -> dict[str, str]:
    """Console-script name -> the installed distribution providing it."""
    return {
        ep.name: canonicalize_name(ep.dist.name)
        for ep in metadata.entry_points(group="console_scripts")
        if ep.dist is not None
    }


def command_needs(argv: list[str], why: str) -> set[Need]:
    """What one simple command needs; programs that no installed distribution provides (bash,
    curl, mkdir) are the system's."""
    program, args = Path(argv[0]).name, argv[1:]
    if program in ("python", "python3"):
        if args[:1] == ["-c"] and len(args) > 1:
            return needs_of_modules(code_needs(args[1]), why)
        if args[:2] == ["-m", "sonnx"]:
            return needs_of_modules(sonnx_command_needs(args[2:]), why)
        if args[:1] == ["-m"] and len(args) > 1:
            return set() if args[1] in INSTALLERS else needs_of_modules({args[1]}, why)
        script = ROOT / args[0] if args else None
        if script is None or script.suffix != ".py" or not script.is_file():
            return set()
        modules = code_needs(script.read_text(encoding="utf-8"))
        beside = {p.stem for p in script.parent.iterdir()}  # the script's own helpers
        return needs_of_modules({m for m in modules if m.split(".")[0] not in beside}, why)
    if program == "sonnx":
        return needs_of_modules(sonnx_command_needs(args), why)
    if program in INSTALLERS or program not in console_scripts():
        return set()
    return {Need(frozenset([console_scripts()[program]]), None, why, f"runs {program}")}


# -- modules to distributions ---------------------------------------------------------------


@functools.cache
def _distributions_of() -> dict[str, list[str]]:
    return metadata.packages_distributions()


@functools.cache
def _extras_of(dist: str) -> frozenset[str]:
    provided = metadata.distribution(dist).metadata.get_all("Provides-Extra") or []
    return frozenset(canonicalize_name(e) for e in provided)


def _is_local(top: str) -> bool:
    """A module of this checkout outside the package (``bench``, ``tests``, ``examples``)."""
    return (ROOT / top).is_dir() or (ROOT / f"{top}.py").is_file()


@functools.cache
def extra_requirements(dist: str, extra: str) -> frozenset[str]:
    """The distributions ``dist[extra]`` adds to ``dist``."""
    added = set()
    for line in metadata.distribution(dist).requires or []:
        requirement = Requirement(line)
        marker = requirement.marker
        in_extra = marker is not None and marker.evaluate({"extra": extra})
        if in_extra and not marker.evaluate({"extra": ""}):
            added.add(canonicalize_name(requirement.name))
    return frozenset(added)


def needs_of_modules(modules: Iterable[str], why: str) -> set[Need]:
    """The distributions providing ``modules``; a module no installed distribution provides
    is a need that nothing meets."""
    needs = set()
    for module in modules:
        top, _, rest = module.partition(".")
        if _is_local(top):
            continue
        dists = frozenset(canonicalize_name(d) for d in _distributions_of().get(top, []))
        sub = canonicalize_name(rest.split(".")[0]) if rest else None
        extra = sub if any(sub in _extras_of(d) for d in dists) else None
        needs.add(Need(dists, extra, why, f"imports {module}"))
    return needs


def fence_needs(fence: Fence) -> set[Need]:
    """What a python or shell block needs (skipped ones too: a reader still runs them)."""
    why = f"{fence.where}:{fence.line}"
    if fence.lang in PYTHON:
        return needs_of_modules(code_needs(fence.code), why)
    if fence.lang in SHELL:
        return {
            need
            for line in command_lines(fence)
            for argv in _simple_commands(line)
            for need in command_needs(argv, why)
        }
    return set()


# -- install lines and what they install ----------------------------------------------------


def install_lines(text: str, fences_: list[Fence]) -> dict[int, list[str]]:
    """For each fence (by its line), the arguments of the install line its section is under
    (``["."]`` where none is)."""
    inside = {n for fence in fences_ for n in range(fence.line, fence.end + 1)}
    starts = {fence.line for fence in fences_}
    sections: list[tuple[int, list[str]]] = [(0, ["."])]  # (heading level, its install line)
    found = {}
    for number, line in enumerate(text.split("\n"), 1):
        if number in starts:
            found[number] = sections[-1][1]
        if number in inside:
            continue
        heading = HEADING.match(line)
        if heading:
            level = len(heading[1])
            while sections[-1][0] >= level:
                sections.pop()
            sections.append((level, sections[-1][1]))
        for span in INSTALL_LINE.findall(line):
            args = [a for a in shlex.split(span)[2:] if not a.startswith("-")]
            sections[-1] = (sections[-1][0], args)
    return found


@functools.cache
def pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _sonnx_requirements(extras: Iterable[str], project: Mapping[str, Any]) -> list[str]:
    optional = project["project"]["optional-dependencies"]
    unknown = set(extras) - set(optional)
    if unknown:
        raise AssertionError(f"pyproject.toml has no extra {sorted(unknown)}")
    return [*project["project"]["dependencies"], *(r for e in extras for r in optional[e])]


def installed_by(args: list[str], project: Mapping[str, Any] | None = None) -> dict[str, set[str]]:
    """What ``pip install ARGS`` installs: canonical distribution name -> the extras asked of
    it. sonnx's requirements come from ``project`` (this checkout's pyproject.toml)."""
    project = project or pyproject()
    todo: list[tuple[Requirement, str]] = []  # (requirement, the extra it was listed under)
    for arg in args:
        target = SONNX_TARGET.match(arg)
        if target:
            extras = [e.strip() for e in (target["extras"] or "").split(",") if e.strip()]
            todo += [(Requirement(r), "") for r in _sonnx_requirements(extras, project)]
        else:
            todo.append((Requirement(arg), ""))
    found: dict[str, set[str]] = {}
    while todo:
        requirement, extra = todo.pop()
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": extra}):
            continue
        dist = canonicalize_name(requirement.name)
        extras = {canonicalize_name(e) for e in requirement.extras}
        first = dist not in found
        new = extras - found.setdefault(dist, set())
        found[dist] |= extras
        if not (first or new):
            continue
        if dist == "sonnx":  # an extra that names others (sonnx[serve]): from pyproject.toml
            todo += [(Requirement(r), "") for r in _sonnx_requirements(sorted(new), project)]
            continue
        try:
            requires = metadata.distribution(dist).requires or []
        except metadata.PackageNotFoundError:
            continue  # not installed here: its own requirements are unknown
        for context in ([""] if first else []) + sorted(new):
            todo += [(Requirement(r), context) for r in requires]
    return found


def unmet(needs: Iterable[Need], installed: Mapping[str, set[str]]) -> list[str]:
    """The needs ``installed`` does not meet, as messages: one per block and distribution,
    naming the shortest import that needs it (``starlette``, not each of its submodules)."""
    missing: dict[tuple[str, str], str] = {}
    for need in sorted(needs, key=lambda n: (n.where, len(n.what), n.what)):
        met = need.dists & set(installed)
        if not need.dists:
            lacking = "which no installed distribution provides"
        elif not met:
            lacking = " or ".join(sorted(need.dists))
        elif need.extra is not None and not any(
            extra_requirements(d, need.extra) <= set(installed) for d in met
        ):
            lacking = f"{'/'.join(sorted(met))}[{need.extra}]"
        else:
            continue
        missing.setdefault((need.where, lacking), f"{need.where}: {need.what} ({lacking})")
    return list(missing.values())
