"""The export tests cover everything sonnx can build: every Operator class and lower-case
function the autograd modules list in ``__all__``, and every layer in ``sonnx.layer``.

A new op or layer without an export test fails here, naming what is missing."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

from sonnx import layer, operators
from sonnx.engine.operator import Operator
from sonnx.onnx.exporter import _topological_ops
from tests.onnx import (
    test_export_contrib_quant,
    test_export_layers,
    test_export_ml,
    test_export_more,
    test_export_nn,
    test_export_ops,
    test_export_strings,
)
from tests.onnx.export_check import run_eager

HERE = Path(__file__).parent
CASE_FILES = [
    "test_export_ops.py",
    "test_export_nn.py",
    "test_export_more.py",
    "test_export_layers.py",
    "test_export_models.py",
    "test_export_ml.py",
    "test_export_strings.py",
    "test_export_contrib_quant.py",
]
# Public names that are not operations.
NOT_OPS = {
    "Operator",
    "ContribOperator",
    "backward",
    "gradients",
    "trainable_tensors",
    "Layer",
    "tracing",
    "defer_check",
    "deferred_checks",
    "defers_checks_on",
    "value_checks",
    "check_elements",
    "check_shape",
    "max_tensor_bytes",
    # onnxruntime's kernels (operators/quantize/ort_kernels.py, ort_sessions.py): plumbing of
    # the MatMulNBits, DynamicQuantizeMatMul, MatMulIntegerToFloat and DynamicQuantizeLSTM
    # operators (ort_lstm.py), which their own export cases cover, not functions of the API
    "BridgedNode",
    "KernelChoice",
    "bridged_product",
    "choose_kernels",
    "kernel_lines",
    "nbits_spec",
    "register_bridge",
    "lstm_spec",
    "NodeSpec",
    "SessionKernel",
    "table_softmax",
    "kernel_for",
    "onnxruntime_module",
    # a decode step's attention over the filled cache rows (attention/filled_rows.py): plumbing
    # of GroupQueryAttention, which exports itself as it came
    "attend_filled_rows",
    "attend_rows",
    "attends_filled_rows",
    # products reading one input as one session (ort_groups.py): plumbing of MatMulNBits too
    "GroupSpec",
    "group_spec",
    "grouped_products",
    # control flow, sequences and optionals (operators/control) run other operators, which are
    # recorded, and record no node of their own: an export writes what they ran (a Loop
    # unrolled), as tests/operators/control/test_export.py checks
    "GraphValueOperator",
    "If",
    "Loop",
    "Scan",
    "SequenceConstruct",
    "SequenceEmpty",
    "SequenceInsert",
    "SequenceAt",
    "SequenceErase",
    "SequenceLength",
    "ConcatFromSequence",
    "SplitToSequence",
    "SequenceMap",
    "Optional",
    "OptionalHasElement",
    "OptionalGetElement",
    # Gradient recomputes its forward graph and returns plain tensors (gradients of
    # gradients are not taken): it records no node of its own
    "Gradient",
}


def _autograd_public() -> tuple[set[str], set[str]]:
    """(Operator op types, function names) listed in the operator modules' ``__all__``."""
    ops, functions = set(), set()
    for info in pkgutil.walk_packages(operators.__path__, "sonnx.operators."):
        module = importlib.import_module(info.name)
        for name in getattr(module, "__all__", []):
            value = getattr(module, name)
            if name in NOT_OPS:
                continue
            if inspect.isclass(value) and issubclass(value, Operator):
                ops.add(value.op_type)
            elif inspect.isfunction(value):
                functions.add(name)
    return ops, functions


def _names_used(prefix: str) -> set[str]:
    """``X`` for every ``prefix.X`` and every string constant in the export test files."""
    used = set()
    for file in CASE_FILES:
        for node in ast.walk(ast.parse((HERE / file).read_text())):
            if isinstance(node, ast.Attribute) and getattr(node.value, "id", None) == prefix:
                used.add(node.attr)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                used.add(node.value)
    return used


def test_every_operator_class_is_exported_by_some_case() -> None:
    recorded: set[str] = set()
    for params in (
        test_export_ops.ALL
        + test_export_nn.ALL
        + test_export_more.ALL
        + test_export_ml.ML
        + test_export_strings.ALL
        + test_export_contrib_quant.CASES
    ):
        build, make, _ = params.values
        _, outputs = run_eager(build, make(2))
        recorded |= {op.op_type for op in _topological_ops(outputs)}
    for params in test_export_layers.LAYERS:
        make_layer, make, _ = params.values
        _, outputs = run_eager(make_layer(), make(2))
        recorded |= {op.op_type for op in _topological_ops(outputs)}
    ops, _ = _autograd_public()
    recorded |= _exported_beside_their_operator_tests()
    assert not ops - recorded, f"operators without an export test: {sorted(ops - recorded)}"


#: com.microsoft operators whose export (built with the class, written by ``to_onnx``, the node
#: compared as it came) is tested in their own operator test files, by op type.
EXPORTED_IN_OPERATOR_TESTS = {
    "GroupQueryAttention": "operators/attention/test_contrib_gqa.py",
    "RotaryEmbedding": "operators/attention/test_contrib_gqa.py",
    "Attention": "operators/attention/test_contrib_bert.py",
    "MultiHeadAttention": "operators/attention/test_contrib_bert.py",
    "QAttention": "operators/attention/test_contrib_bert.py",
    "DecoderMaskedMultiHeadAttention": "operators/attention/test_contrib_bert.py",
    "RelativePositionBias": "operators/attention/test_contrib_bias.py",
    "NhwcConv": "operators/linalg/test_contrib_fused.py",
    "DynamicQuantizeLSTM": "operators/rnn/test_contrib_lstm.py",
}


def _exported_beside_their_operator_tests() -> set[str]:
    """The op types of EXPORTED_IN_OPERATOR_TESTS whose file names the class and calls to_onnx."""
    found = set()
    for op_type, file in EXPORTED_IN_OPERATOR_TESTS.items():
        text = (HERE.parent / file).read_text()
        if "to_onnx(" in text and f"{op_type}(" in text:
            found.add(op_type)
    return found


def test_every_function_and_layer_is_used_by_some_case() -> None:
    _, functions = _autograd_public()
    missing = functions - _names_used("ag")
    assert not missing, f"autograd functions without an export test: {sorted(missing)}"
    layers = set(layer.__all__) - NOT_OPS
    missing = layers - _names_used("layer")
    assert not missing, f"layers without an export test: {sorted(missing)}"
