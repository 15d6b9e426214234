"""``sonnx generate DIR --prompt``: text streamed piece by piece, as sonnx.generate returns it."""

from __future__ import annotations

import sonnx
from sonnx import cli
from sonnx.generation import command


def test_the_cli_streams_the_text_sonnx_generate_returns(llama_dir, monkeypatch) -> None:
    pieces: list[str] = []
    monkeypatch.setattr(command, "_write", pieces.append)
    prompt = "w5 w9 w33 w7"
    assert cli.main(["generate", str(llama_dir), "--prompt", prompt, "--max-new-tokens", "12"]) == 0
    text = sonnx.generate(llama_dir, prompt, max_new_tokens=12)
    assert len(pieces) == 13 and pieces[-1] == "\n"  # one piece per token, then the newline
    assert "".join(pieces).strip() == text.strip() and text.count("w") == 12


def test_token_ids_in_give_token_ids_out(llama_dir, llama_rep, capsys) -> None:
    argv = ["generate", str(llama_dir), "--ids", "1", "5", "9", "--max-new-tokens", "4"]
    assert cli.main(argv) == 0
    expected = llama_rep.generate([1, 5, 9], max_new_tokens=4, eos_token_id=2)[0, 3:]
    assert capsys.readouterr().out.split() == [str(t) for t in expected]


def test_a_prompt_and_ids_together_are_refused(llama_dir, capsys) -> None:
    assert cli.main(["generate", str(llama_dir), "--prompt", "w5", "--ids", "5"]) == 2
    assert "exactly one of --prompt" in capsys.readouterr().err
