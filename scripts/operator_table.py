"""The operator-support page (operators.md), written from the registry and the conformance
cases when the docs are built, so the page says what the code does and nobody regenerates it.

mkdocs.yml names this file as a hook: :func:`on_files` adds the page to the build (it is not
checked in). ``python scripts/operator_table.py`` prints the page, to read it without a build.
"""

from __future__ import annotations

import collections
import sys
from pathlib import Path
from typing import TYPE_CHECKING

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import onnx  # noqa: E402
from tests.onnx.conformance import all_cases  # noqa: E402
from tests.onnx.test_conformance import EXCLUDED  # noqa: E402

import sonnx  # noqa: E402, F401  (registers every converter)
from sonnx.engine.operator import Operator  # noqa: E402
from sonnx.onnx.registry import REGISTRY  # noqa: E402

if TYPE_CHECKING:
    from mkdocs.config.defaults import MkDocsConfig
    from mkdocs.structure.files import Files

#: The page's path under docs/, where mkdocs.yml's nav and the other pages link to it.
PAGE = "operators.md"
#: The domains the table lists, in this order ("" is ai.onnx); anything else registered is an
#: extension of some user's, not part of sonnx.
DOMAINS = ("", "ai.onnx.ml", "ai.onnx.preview", "ai.onnx.preview.training", "com.microsoft")

HEADER = """# Supported operators

<!-- Written by scripts/operator_table.py from the registry when the docs are built. -->

Every operator sonnx imports, by domain, as the importer's registry holds it
(`sonnx.onnx.registry`). A model may use any opset: each node runs the registered
version that is the newest not above the model's opset for its domain.

- **since-versions**: the operator versions sonnx has a class or converter for.
- **gradient**: *yes* when a loss computed through the operator reaches its float inputs
  (integer, boolean and string values carry none); *no* for inference-only operators (the
  `ai.onnx.ml` estimators: a `backward` through them names them).
- **export**: an imported model is always written back as it came ([export](guides/export.md));
  for a node recorded by sonnx's own API, *node* means one node of the operator with its
  attributes, *own* that the class writes its ONNX form itself.
- **conformance**: official ONNX node cases of onnx {onnx_version} (`collect_testcases()`,
  function expansions not counted) whose operator this is, passed / run; every case runs in
  `tests/onnx/test_conformance.py`, and the ones that do not pass are listed at the end.

In all, **{passed} of {total} official node cases pass** ({percent:.1f} %; expansions counted;
inputs seeded), the string cases (Equal, StringConcat, StringSplit, StringNormalizer,
RegexFullMatch, LabelEncoder) and ImageDecoder (through Pillow) included. For scale,
onnxruntime 1.31 passes about 74 % of these cases. `python scripts/conformance.py [OP ...]`
prints every case's result. Also tested: the nine `light_*` zoo models and the
`simple`, `pytorch-converted` and `pytorch-operator` suites shipped in the onnx wheel (all 140
cases pass), torch-exported CNNs and a BERT-style encoder at opsets 9, 11, 13 and 17 against
onnxruntime at batch 1 and 8, export of every op and layer checked by `onnx.checker` (full) and
onnxruntime at two batch sizes, and import -> export -> import fixed points.

What onnxruntime's own tools write runs: {contrib} `com.microsoft` operators (and the
default-domain `SimplifiedLayerNormalization`), each matched to onnxruntime's CPU kernel on
single-node models and on models the tools write from small torch modules built in the tests:
the transformer optimizer's fused BERT-style encoder (`Attention`/`MultiHeadAttention`,
`EmbedLayerNormalization`, `SkipLayerNormalization`, `BiasGelu`/`FastGelu`, at opt levels 0-2)
and Llama-style block (`SimplifiedLayerNormalization`, `SkipSimplifiedLayerNormalization`),
`quantize_static` (QOperator and QDQ, per channel), `quantize_dynamic`, and
`MatMulNBitsQuantizer` (`MatMulNBits`, 4-bit, symmetric or not, two block sizes, accuracy
levels 0 and 4); `GroupQueryAttention` through a prompt and three decode steps with its KV
cache fed back. The float ones train (a 4-bit `MatMulNBits` passes gradients to its input, its
weight frozen) and export as they came. [com.microsoft operators](contrib-operators.md) lists
every operator of the domain, supported or not, with its gradient and what it was tested
against. Not yet: models written by onnxruntime-genai's model builder,
`QEmbedLayerNormalization`, `NhwcConv`, and GQA's quantized KV cache.
"""


def _case_counts() -> tuple[dict[tuple[str, str], list[int]], int, int]:
    """(domain, op) -> [passed, run] over non-expanded cases; and all cases passed, run."""
    counts: dict[tuple[str, str], list[int]] = collections.defaultdict(lambda: [0, 0])
    cases = all_cases()
    for name, case in cases.items():
        if "_expanded" in name:
            continue
        node = case.model.graph.node[-1]
        count = counts[("" if node.domain == "ai.onnx" else node.domain, node.op_type)]
        count[0] += name not in EXCLUDED
        count[1] += 1
    return counts, len(cases) - len(EXCLUDED), len(cases)


def render() -> str:
    """The page as the registry and the conformance cases make it now."""
    counts, passed, total = _case_counts()
    lines = [
        HEADER.format(
            onnx_version=onnx.__version__,
            passed=passed,
            total=total,
            percent=100.0 * passed / total,
            contrib=len(REGISTRY.op_types("com.microsoft")),
        )
    ]
    for domain in DOMAINS:
        ops = REGISTRY.op_types(domain)
        lines += [
            f"## {domain or 'ai.onnx (default domain)'}",
            "",
            f"{len(ops)} operator{'' if len(ops) == 1 else 's'}.",
            "",
            "| operator | since-versions | gradient | export | conformance |",
            "|---|---|---|---|---|",
        ]
        for op in ops:
            cls = REGISTRY.operator_class(domain, op)
            versions = ", ".join(str(v) for v in REGISTRY.versions(op, domain))
            gradient = "no" if cls.inference_only else "yes"
            export = "own" if cls is not Operator and "export" in vars(cls) else "node"
            passed_run = counts.get((domain, op))
            conformance = f"{passed_run[0]} / {passed_run[1]}" if passed_run else "-"
            lines.append(f"| {op} | {versions} | {gradient} | {export} | {conformance} |")
        lines.append("")
    lines += ["## Official cases that do not pass", ""]
    lines += [f"- `{name}`: {reason}" for name, reason in sorted(EXCLUDED.items())]
    return "\n".join(lines) + "\n"


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """mkdocs hook: add the operator page, rendered now, to the files the build writes.

    :param files: the docs' files as mkdocs collected them.
    :param config: the build's configuration.
    :returns: ``files`` with the operator page.
    """
    from mkdocs.structure.files import File

    files.append(File.generated(config, PAGE, content=render()))
    return files


if __name__ == "__main__":
    print(render(), end="")
