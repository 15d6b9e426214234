"""``sonnx generate DIR --prompt``: text streamed piece by piece, as sonnx.generate returns it;
``--graph`` gives the eager tokens; ``--device`` and ``--cuda-graph`` refuse what cannot hold."""

from __future__ import annotations

import json
import re
from pathlib import Path

import onnx
import pytest
import torch

import sonnx
from sonnx import cli
from sonnx.generation import command
from sonnx.testing.gqa_decoder import GENAI_CONFIG, gqa_decoder


def test_the_cli_streams_the_text_sonnx_generate_returns(llama_dir, monkeypatch) -> None:
    pieces: list[str] = []
    monkeypatch.setattr(command, "_write", pieces.append)
    prompt = "w5 w9 w33 w7"
    assert cli.main(["generate", str(llama_dir), "--prompt", prompt, "--max-new-tokens", "12"]) == 0
    text = sonnx.generate(llama_dir, prompt, max_new_tokens=12)
    assert len(pieces) == 13 and pieces[-1] == "\n"  # one piece per token, then the newline
    assert "".join(pieces).strip() == text.strip() and text.count("w") == 12


def test_token_ids_in_give_the_prompt_and_continuation_out(llama_dir, llama_rep, capsys) -> None:
    """The ids printed are those SingaRep.generate returns: the prompt's, then the new ones."""
    argv = ["generate", str(llama_dir), "--ids", "1", "5", "9", "--max-new-tokens", "4"]
    assert cli.main(argv) == 0
    expected = llama_rep.generate([1, 5, 9], max_new_tokens=4, eos_token_id=2)[0]
    assert capsys.readouterr().out.split() == [str(t) for t in expected]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--ids", "1", "-5"], r"token ids must be in \[0, 95\] .*received -5"),
        (["--ids", "1", "99999"], "received 99999"),
        (
            ["--ids", "1", "5", "--max-new-tokens", "300"],
            "context length of 256; ask for at most 254",
        ),
        (["--prompt", "w5 w9", "--max-new-tokens", "300"], "context length of 256"),
    ],
)
def test_ids_and_lengths_the_model_cannot_take_are_refused_up_front(
    llama_dir, capsys, argv: list[str], message: str
) -> None:
    assert cli.main(["generate", str(llama_dir), *argv]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert re.search(message, err), err


def test_a_prompt_and_ids_together_are_refused(llama_dir, capsys) -> None:
    assert cli.main(["generate", str(llama_dir), "--prompt", "w5", "--ids", "5"]) == 2
    assert "exactly one of --prompt" in capsys.readouterr().err


@pytest.fixture(scope="module")
def gqa_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A onnxruntime-genai layout directory (GroupQueryAttention over a shared KV buffer),
    written without onnxruntime-genai's builder."""
    root = tmp_path_factory.mktemp("gqa")
    onnx.save(gqa_decoder(), str(root / "model.onnx"))
    (root / "genai_config.json").write_text(json.dumps(GENAI_CONFIG))
    return root


def _ids_out(argv: list[str], capsys: pytest.CaptureFixture) -> list[str]:
    assert cli.main(argv) == 0
    return capsys.readouterr().out.split()


def test_graph_mode_gives_the_eager_tokens(gqa_dir, capsys, monkeypatch) -> None:
    loaded = []

    def load_decoder(*args, **kwargs):
        loaded.append(real(*args, **kwargs))
        return loaded[-1]

    real = command.load_decoder
    monkeypatch.setattr(command, "load_decoder", load_decoder)
    argv = ["generate", str(gqa_dir), "--ids", "3", "17", "40", "--max-new-tokens", "6"]
    eager = _ids_out([*argv, "--device", "cpu"], capsys)
    assert (
        len(eager) == 3 + 6
        and eager[:3] == ["3", "17", "40"]
        and loaded[-1].rep.graph_runner is None
    )
    assert _ids_out([*argv, "--graph"], capsys) == eager
    assert loaded[-1].running_rep.graph_runner.compile_count == 2  # the prompt's, the step's


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--graph", "--cuda-graph"], "--cuda-graph needs a CUDA --device"),
        (["--cuda-graph"], "--cuda-graph captures graph mode's decode step; add --graph"),
        (["--device", "tpu"], "device: expected 'cpu', 'cuda' or 'cuda:N'"),
        (["--device", "meta"], "--device must be cpu, cuda or cuda:N, received 'meta'"),
    ],
)
def test_options_that_cannot_hold_are_refused(gqa_dir, capsys, options, message) -> None:
    argv = ["generate", str(gqa_dir), "--ids", "3", "--device", "cpu", *options]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("sonnx: error: ") and message in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal where CUDA is absent")
def test_a_cuda_device_without_cuda_is_refused(gqa_dir, capsys) -> None:
    argv = ["generate", str(gqa_dir), "--ids", "3", "--device", "cuda", "--graph", "--cuda-graph"]
    assert cli.main(argv) == 2
    expected = "--device cuda needs CUDA, and torch.cuda.is_available() is False"
    assert expected in capsys.readouterr().err
