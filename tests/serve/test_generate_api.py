"""Triton's generate extension over HTTP: ``generate`` and ``generate_stream`` give the tokens
``rep.generate`` gives (beam search included), concurrent requests share prefills and decode
steps, generation runs the graph ``/infer`` runs, and bad requests are 400s."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from sonnx.generation import load_decoder
from sonnx.serve.app import create_app
from sonnx.serve.errors import ModelUnavailableError
from sonnx.serve.generate_api import GenerateApi
from sonnx.serve.metrics import ServeMetrics
from sonnx.serve.repository import ModelRepository
from tests.genai_builds import SENTENCES, build
from tests.generation.optimum_models import export_optimum_style, tiny_llama, word_tokenizer
from tests.serve import helpers

PROMPT = [1, 5, 9, 33, 7]


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("repository")
    llama = export_optimum_style(tiny_llama(), root / "llama" / "1")
    word_tokenizer(96).save(str(llama / "tokenizer.json"))
    # Concurrent requests' prompts arrive within this delay of each other: one prefill.
    (root / "llama" / "config.json").write_text(json.dumps({"max_queue_delay_ms": 300}))
    shutil.copytree(build("llama", "int4"), root / "genai" / "1")
    (root / "genai" / "config.json").write_text(json.dumps({"max_queue_delay_ms": 300}))
    helpers.write_model(root, "identity", 1, helpers.identity_model())
    return root


@pytest.fixture(scope="module")
def app(repository: Path):
    return create_app(repository)


@pytest.fixture(scope="module")
def port(app):
    with helpers.thread_server(app) as port:
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
    prompt = model.tokenizer.encode(text)
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


@pytest.mark.parametrize("name", ["llama", "genai"])  # genai's: one shared cache buffer
def test_eight_concurrent_requests_are_correct_and_batched(
    port: int, repository: Path, name: str
) -> None:
    model = load_decoder(repository / name / "1")
    prompts = [[1, 5 + i, 9, 3 * i + 4][: 2 + i % 3] for i in range(8)]  # 2 to 4 tokens
    expected = [model.generate(p, max_new_tokens=24)[0, len(p) :].tolist() for p in prompts]
    prefill = "sonnx_serve_prefill_batch_size"
    prefills = helpers.metric(port, f"{prefill}_count", model=name)
    prompted = helpers.metric(port, f"{prefill}_sum", model=name)

    def ask(prompt: list[int]) -> list[int]:
        body = {"input_ids": prompt, "parameters": {"max_tokens": 24}}
        status, data = post(port, f"/v2/models/{name}/generate_stream", body)
        assert status == 200
        return [t for e in events(data) for t in e["output_ids"]]  # a last one: held-back text

    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(ask, prompts)) == expected
    _, _, metrics = helpers.http(port, "GET", "/metrics")
    lines = metrics.decode().splitlines()

    def value(prefix: str) -> float:
        return sum(float(x.split()[-1]) for x in lines if x.startswith(prefix))

    steps = value(f'sonnx_serve_decode_batch_size_count{{model="{name}"}}')
    rows = value(f'sonnx_serve_decode_batch_size_sum{{model="{name}"}}')
    assert rows > steps  # some steps ran several requests' sequences at once
    assert value(f'{prefill}_sum{{model="{name}"}}') - prompted == 8
    assert value(f'{prefill}_count{{model="{name}"}}') - prefills < 8  # prompts shared passes


@pytest.mark.parametrize("route", ["generate", "generate_stream"])
def test_beam_search_equals_rep_generate(port: int, repository: Path, route: str) -> None:
    model = load_decoder(repository / "llama" / "1")
    expected = model.generate(PROMPT, max_new_tokens=10, num_beams=3)[0, len(PROMPT) :]
    body = {"input_ids": PROMPT, "parameters": {"max_tokens": 10, "num_beams": 3}}
    status, data = post(port, f"/v2/models/llama/{route}", body)
    assert status == 200, data
    if route == "generate":
        got = json.loads(data)["output_ids"]
    else:
        got = [t for e in events(data) for t in e["output_ids"]]
    assert got == expected.tolist()


@pytest.mark.parametrize("route", ["generate", "generate_stream"])
def test_a_client_that_goes_away_cancels_its_beam_request(app, port: int, route: str) -> None:
    """The scheduler is held at the request's first decode step (so it cannot finish) until
    the request is cancelled, which only the client's disconnect can do; then it goes on."""
    post(port, "/v2/models/llama/generate", {"input_ids": PROMPT, "parameters": {"max_tokens": 1}})
    scheduler = app.state.generation._served[app.state.repository.get("llama")].scheduler
    submit, on_step, asked, stepping = scheduler.submit, scheduler.on_step, [], threading.Event()

    def held(rows: int, seconds: float) -> None:
        stepping.set()
        asked[0].cancelled.wait(timeout=60)

    scheduler.submit = lambda request: (asked.append(request), submit(request))[-1]
    scheduler.on_step = held
    try:
        body = json.dumps({"input_ids": PROMPT, "parameters": {"max_tokens": 50, "num_beams": 3}})
        head = f"POST /v2/models/llama/{route} HTTP/1.1\r\nHost: x\r\n"
        head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        with socket.create_connection(("127.0.0.1", port), timeout=60) as client:
            client.sendall(head.encode() + body.encode())
            assert stepping.wait(timeout=60)
        assert asked[0].cancelled.wait(timeout=30)
    finally:
        scheduler.submit, scheduler.on_step = submit, on_step


def test_generation_runs_the_graph_infer_runs_and_follows_a_reload(app, port: int) -> None:
    body = {"input_ids": PROMPT, "parameters": {"max_tokens": 6}}
    first = json.loads(post(port, "/v2/models/llama/generate", body)[1])["output_ids"]
    old = app.state.repository.get("llama")
    decoder = app.state.generation.decoder(old)
    assert decoder.rep is old.rep  # one prepared model: the weights are in memory once
    assert all(decoder.rep.params[n] is t for n, t in old.rep.params.items())
    status, _, _ = helpers.http(port, "POST", "/v2/repository/models/llama/load", timeout=120)
    assert status == 200
    new = app.state.repository.get("llama")
    assert new is not old and app.state.generation.decoder(old) is None  # retired with it
    assert json.loads(post(port, "/v2/models/llama/generate", body)[1])["output_ids"] == first
    assert app.state.generation.decoder(new).rep is new.rep


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
        ("llama", {"input_ids": [1], "parameters": {"num_beams": 0}}, "num_beams must be"),
        (
            "llama",
            {"input_ids": [1], "parameters": {"num_beams": 2, "do_sample": True}},
            "does not sample",
        ),
        ("llama", {"input_ids": [1], "parameters": {"num_beams": 17}}, "at most 16"),
        ("llama", {"input_ids": [10**6]}, "must be in [0, 95] (the model's vocabulary of 96)"),
        ("llama", {"input_ids": [1, -5]}, "received -5"),
        (
            "llama",
            {"input_ids": [1, 5], "parameters": {"max_tokens": 300}},
            "past the model's context length of 256; ask for at most 254",
        ),
    ],
)
def test_bad_requests_are_400(port: int, name: str, body: dict, words: str) -> None:
    status, data = post(port, f"/v2/models/{name}/generate", body)
    assert status == 400 and words in json.loads(data)["error"]


def test_a_version_retired_while_its_decoder_is_set_up_answers_503(repository: Path) -> None:
    """A request that found the version just before a reload replaced it gets a 503 to retry,
    and no scheduler is left running for the retired version."""

    async def main() -> None:
        metrics = ServeMetrics()
        models = ModelRepository(repository, metrics)
        await models.load("llama")
        served = models.get("llama")
        api = GenerateApi(models, metrics, read_body=None)
        await served.close()
        with pytest.raises(ModelUnavailableError, match="just unloaded; retry"):
            await api._generation("llama", served)
        assert api.decoder(served) is None

    asyncio.run(main())
