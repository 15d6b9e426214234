"""Triton's generate extension over HTTP: ``generate`` and ``generate_stream`` give the tokens
``rep.generate`` gives, concurrent requests share decode steps, and bad requests are 400s."""

from __future__ import annotations

import json
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from sonnx.generation import load_decoder
from sonnx.serve.app import create_app
from tests.genai_builds import SENTENCES, build
from tests.generation.optimum_models import export_optimum_style, tiny_llama, word_tokenizer
from tests.serve import helpers

PROMPT = [1, 5, 9, 33, 7]


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("repository")
    llama = export_optimum_style(tiny_llama(), root / "llama" / "1")
    word_tokenizer(96).save(str(llama / "tokenizer.json"))
    shutil.copytree(build("llama", "int4"), root / "genai" / "1")
    helpers.write_model(root, "identity", 1, helpers.identity_model())
    return root


@pytest.fixture(scope="module")
def port(repository: Path):
    with helpers.thread_server(create_app(repository)) as port:
        deadline = time.monotonic() + 120
        while helpers.http(port, "GET", "/v2/health/ready")[0] != 200:
            assert time.monotonic() < deadline, "the repository did not load"
            time.sleep(0.1)
        yield port


def post(port: int, path: str, body: dict) -> tuple[int, bytes]:
    status, _, data = helpers.http(port, "POST", path, json.dumps(body).encode(), timeout=120)
    return status, data


def events(data: bytes) -> list[dict]:
    """The JSON payloads of a server-sent event stream."""
    lines = data.decode().splitlines()
    return [json.loads(line[6:]) for line in lines if line.startswith("data: ")]


@pytest.mark.parametrize("name", ["llama", "genai"])
def test_generate_and_stream_equal_rep_generate(port: int, repository: Path, name: str) -> None:
    model = load_decoder(repository / name / "1")
    text = SENTENCES[0] if name == "genai" else "w5 w9 w33 w7"
    prompt = model.tokenizer.encode(text).ids
    expected = model.generate(prompt, max_new_tokens=16)[0, len(prompt) :].tolist()
    body = {"text_input": text, "parameters": {"max_tokens": 16}}
    status, data = post(port, f"/v2/models/{name}/generate", body)
    assert status == 200, data
    answer = json.loads(data)
    assert answer["output_ids"] == expected and answer["model_name"] == name
    assert answer["text_output"] == model.tokenizer.decode(expected, skip_special_tokens=True)
    status, data = post(port, f"/v2/models/{name}/versions/1/generate_stream", body)
    assert status == 200
    streamed = events(data)
    assert [t for e in streamed for t in e["output_ids"]] == expected
    assert "".join(e["text_output"] for e in streamed) == answer["text_output"]


def test_eight_concurrent_requests_are_correct_and_batched(port: int, repository: Path) -> None:
    model = load_decoder(repository / "llama" / "1")
    prompts = [[1, 5 + i, 9, 3 * i + 4] for i in range(8)]
    expected = [model.generate(p, max_new_tokens=24)[0, 4:].tolist() for p in prompts]

    def ask(prompt: list[int]) -> list[int]:
        body = {"input_ids": prompt, "parameters": {"max_tokens": 24}}
        status, data = post(port, "/v2/models/llama/generate_stream", body)
        assert status == 200
        return [e["output_ids"][0] for e in events(data)]

    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(ask, prompts)) == expected
    _, _, metrics = helpers.http(port, "GET", "/metrics")
    lines = metrics.decode().splitlines()

    def value(prefix: str) -> float:
        return sum(float(x.split()[-1]) for x in lines if x.startswith(prefix))

    steps = value('sonnx_serve_decode_batch_size_count{model="llama"}')
    rows = value('sonnx_serve_decode_batch_size_sum{model="llama"}')
    assert rows > steps  # some steps ran several requests' sequences at once


def test_seeded_sampling_is_reproducible_through_the_server(port: int) -> None:
    parameters = {"max_tokens": 12, "do_sample": True, "temperature": 1.5, "seed": 3}
    body = {"input_ids": PROMPT, "parameters": parameters}
    first = json.loads(post(port, "/v2/models/llama/generate", body)[1])["output_ids"]
    assert json.loads(post(port, "/v2/models/llama/generate", body)[1])["output_ids"] == first
    assert len(first) == 12


@pytest.mark.parametrize(
    ("name", "body", "words"),
    [
        ("identity", {"input_ids": [1]}, "cannot generate"),
        ("llama", {"input_ids": []}, "input_ids"),
        ("llama", {"input_ids": [1], "parameters": {"beams": 2}}, "unknown parameters"),
        ("llama", {"input_ids": [1], "parameters": {"max_tokens": 0}}, "max_tokens"),
        ("llama", {"input_ids": [10**6]}, "indices in [-96, 95], received 1000000"),
    ],
)
def test_bad_requests_are_400(port: int, name: str, body: dict, words: str) -> None:
    status, data = post(port, f"/v2/models/{name}/generate", body)
    assert status == 400 and words in json.loads(data)["error"]
