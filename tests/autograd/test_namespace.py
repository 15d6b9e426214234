"""``sonnx.autograd`` is an explicit list (``__all__``) of imported names: SINGA's documented
autograd vocabulary and every name the tests, examples, benchmarks and docs reach through it
must be on the list, each once, each resolving to what it names."""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

import sonnx.autograd as autograd

ROOT = Path(__file__).resolve().parents[2]

#: SINGA's autograd functions and entry points (python/singa/autograd.py), which SINGA code
#: calls as ``autograd.<name>``.
SINGA_AUTOGRAD = (
    "backward", "gradients", "relu", "sigmoid", "tanh", "softmax", "leakyrelu", "elu", "selu",
    "softplus", "softsign", "hardsigmoid", "prelu", "cross_entropy", "softmax_cross_entropy",
    "mse_loss", "binary_cross_entropy", "matmul", "add_bias", "add", "sub", "mul", "div",
    "reshape", "transpose", "flatten", "cat", "squeeze", "unsqueeze", "gather", "tile", "slice",
    "split", "shape", "conv2d", "batchnorm_2d", "globalaveragepool", "dropout", "gemm", "exp",
    "log", "sqrt", "pow", "abs", "sign", "ceil", "floor", "negative", "reciprocal", "erf",
    "max", "min", "mean", "sum", "reduce_sum", "reduce_mean", "onehot", "cast", "where",
    "clip", "nonzero", "equal", "less", "greater", "identity", "upsample", "_and", "_or",
    "_not", "_xor",
)  # fmt: skip

#: Module attributes that are not operations: the per-thread training flag (a property).
NOT_LISTED = frozenset({"training"})


def _aliases(tree: ast.Module) -> tuple[set[str], set[str]]:
    """(names bound to the sonnx.autograd module, names imported from it) in one file."""
    modules, names = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {a.asname for a in node.names if a.name == "sonnx.autograd" and a.asname}
        elif isinstance(node, ast.ImportFrom) and node.module == "sonnx":
            modules |= {a.asname or a.name for a in node.names if a.name == "autograd"}
        elif isinstance(node, ast.ImportFrom) and node.module == "sonnx.autograd":
            names |= {a.name for a in node.names}
    return modules, names


def _names_used_in_python() -> set[str]:
    used = set()
    for folder in ("tests", "examples", "bench", "src"):
        for file in (ROOT / folder).rglob("*.py"):
            tree = ast.parse(file.read_text(encoding="utf-8"))
            modules, names = _aliases(tree)
            used |= names
            for node in ast.walk(tree):
                if isinstance(node, ast.Attribute) and getattr(node.value, "id", None) in modules:
                    used.add(node.attr)
    return {name for name in used if not name.startswith("__")}


def _names_used_in_docs() -> set[str]:
    pattern = re.compile(r"(?<![\w.])autograd\.([A-Za-z_]\w*)")
    used = set()
    for file in [*(ROOT / "docs").rglob("*.md"), ROOT / "README.md"]:
        used |= set(pattern.findall(file.read_text(encoding="utf-8")))
    return used


def test_every_name_is_listed_once_and_resolves() -> None:
    assert not [name for name, n in Counter(autograd.__all__).items() if n > 1]
    missing = [name for name in autograd.__all__ if not hasattr(autograd, name)]
    assert not missing


def test_singas_autograd_vocabulary_is_listed() -> None:
    assert not sorted(set(SINGA_AUTOGRAD) - set(autograd.__all__))


def test_every_name_the_project_reaches_through_autograd_is_listed() -> None:
    used = _names_used_in_python() | _names_used_in_docs()
    assert len(used) > 100  # the walk found the tests' uses, not an empty set
    assert not sorted(used - set(autograd.__all__) - NOT_LISTED)
    assert all(hasattr(autograd, name) for name in NOT_LISTED)


def test_the_star_import_gives_exactly_the_list() -> None:
    namespace: dict[str, object] = {}
    exec("from sonnx.autograd import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(autograd.__all__)
