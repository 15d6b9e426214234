"""What graph mode runs eagerly by design, before any trace: random draws and string steps."""

from __future__ import annotations

from onnx import TensorProto, helper

import sonnx
from sonnx.runtime.segments import eager_by_design


def test_random_draws_and_string_steps_run_eagerly_by_design() -> None:
    graph = helper.make_graph(
        [
            helper.make_node("RandomNormalLike", ["x"], ["noise"], name="noise"),
            helper.make_node("Add", ["x", "noise"], ["noisy"], name="add"),
            helper.make_node("Cast", ["noisy"], ["text"], name="to_text", to=TensorProto.STRING),
        ],
        "mixed",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N"])],
        [helper.make_tensor_value_info("text", TensorProto.STRING, ["N"])],
    )
    program = sonnx.prepare(helper.make_model(graph)).program
    found = {program.steps[i].info.name: why for i, why in eager_by_design(program).items()}
    assert found == {
        "noise": "it draws random numbers (RandomNormalLike)",
        "to_text": "it makes strings, which stay on the host",
    }
