"""The process: graceful SIGTERM under load, the API key, the ``sonnx serve`` command."""

from __future__ import annotations

import asyncio
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import sonnx
from sonnx import cli, tensor
from sonnx.serve import create_app
from sonnx.serve.server import bind_socket
from tests.serve import helpers


def test_sigterm_lets_in_flight_requests_finish_and_exits_0(tmp_path: Path) -> None:
    path = helpers.write_model(tmp_path, "slow", 1, helpers.slow_model(), {"max_queue_size": 64})
    server = helpers.ServerProcess(tmp_path)
    images = np.random.default_rng(9).standard_normal((12, 1, *helpers.SLOW_IMAGE))
    images = images.astype(np.float32)

    def send(image: np.ndarray) -> tuple[int, dict[str, str], bytes]:
        body, length = helpers.binary_infer_body("input", image)
        headers = {"Inference-Header-Content-Length": length}
        return helpers.http(server.port, "POST", "/v2/models/slow/infer", body, headers)

    try:
        with ThreadPoolExecutor(max_workers=len(images)) as pool:
            answers = pool.map(send, images)
            in_flight = _wait_until_received(server.port, len(images), timeout=30.0)
            server.proc.terminate()  # SIGTERM
            answers = list(answers)
        assert in_flight > 0, "every request had finished before SIGTERM: nothing was tested"
        assert server.proc.wait(timeout=30) == 0
    finally:
        server.stop()
    rep = sonnx.prepare(path)
    for image, (status, headers, body) in zip(images, answers, strict=True):
        assert status == 200, body
        got = helpers.binary_output(body, headers["inference-header-content-length"], (1, 10))
        np.testing.assert_array_equal(got, tensor.to_numpy(rep.run([image])[0]))
    assert any(entry.get("event") == "stopped" for entry in server.log)


def _wait_until_received(port: int, count: int, timeout: float) -> float:
    """Scrape /metrics until the server has received ``count`` requests; the number in flight
    at that scrape. Each scrape is a round trip, so the loop needs no sleep; it is bounded."""
    deadline = time.monotonic() + timeout
    for _ in range(10_000):
        received = helpers.metric(port, "sonnx_serve_requests_total", model="slow")
        if received >= count:
            return helpers.metric(port, "sonnx_serve_requests_in_flight", model="slow")
        if time.monotonic() > deadline:
            break
    raise TimeoutError(f"the server received {received} of {count} requests in {timeout} s")


def test_api_key_guards_everything_but_health(tmp_path: Path) -> None:
    helpers.write_model(tmp_path, "identity", 1, helpers.identity_model())
    with helpers.thread_server(create_app(tmp_path, api_key="s3cret")) as port:
        assert helpers.http(port, "GET", "/v2/health/live")[0] == 200
        status, headers, body = helpers.http(port, "GET", "/v2")
        assert status == 401 and b"missing or wrong API key" in body
        assert headers["www-authenticate"].startswith("Bearer")
        assert helpers.http(port, "GET", "/v2", headers={"X-API-Key": "s3cre"})[0] == 401
        assert helpers.http(port, "GET", "/metrics")[0] == 401
        assert helpers.http(port, "GET", "/v2", headers={"X-API-Key": "s3cret"})[0] == 200
        client = httpclient.InferenceServerClient(f"127.0.0.1:{port}")
        with pytest.raises(InferenceServerException) as err:
            client.get_server_metadata()
        assert err.value.status() == "401"
        meta = client.get_server_metadata(headers={"Authorization": "Bearer s3cret"})
        assert meta["name"] == "sonnx"
        client.close()


def test_serve_command_reports_a_missing_repository(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(cli, "tune_process_for_serving", lambda: None)  # not in pytest's process
    code = cli.main(["serve", "--model-repository", str(tmp_path / "missing")])
    assert code == 2
    assert f"model repository {tmp_path / 'missing'} is not a directory" in capsys.readouterr().err


def test_serve_command_reports_a_port_in_use(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(cli, "tune_process_for_serving", lambda: None)  # not in pytest's process
    taken = bind_socket("127.0.0.1", 0)
    port = taken.getsockname()[1]
    try:
        code = cli.main(["serve", "--model-repository", str(tmp_path), "--http-port", str(port)])
    finally:
        taken.close()
    assert code == 2
    assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err


def test_accepted_connections_get_tcp_nodelay() -> None:
    """asyncio sets TCP_NODELAY only when the listening socket's proto is TCP; without it a
    response body waits ~40 ms behind its headers for the client's delayed ACK."""

    async def main() -> int:
        accepted: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            sock = writer.get_extra_info("socket")
            accepted.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        server = await asyncio.start_server(on_connect, sock=bind_socket("127.0.0.1", 0))
        port = server.sockets[0].getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        nodelay = await asyncio.wait_for(accepted, 10)
        writer.close()
        server.close()
        await server.wait_closed()
        return nodelay

    assert asyncio.run(main()) != 0
