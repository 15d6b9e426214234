"""Shared by the serve tests: the models served, a real server process, raw HTTP requests."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import torch
import uvicorn
from onnx import TensorProto, helper, numpy_helper
from torch import nn

from sonnx.serve.server import bind_socket
from sonnx.testing import torch_models

OPSET = 17
CNN_IMAGE = (3, 16, 16)
SLOW_IMAGE = (3, 128, 128)
SEQUENCE = 12
VOCAB = 50

# KServe datatype -> (NumPy dtype, ONNX type) of the identity model's inputs.
DATATYPES = {
    "BOOL": (np.dtype(np.bool_), TensorProto.BOOL),
    "UINT8": (np.dtype(np.uint8), TensorProto.UINT8),
    "UINT16": (np.dtype(np.uint16), TensorProto.UINT16),
    "UINT32": (np.dtype(np.uint32), TensorProto.UINT32),
    "UINT64": (np.dtype(np.uint64), TensorProto.UINT64),
    "INT8": (np.dtype(np.int8), TensorProto.INT8),
    "INT16": (np.dtype(np.int16), TensorProto.INT16),
    "INT32": (np.dtype(np.int32), TensorProto.INT32),
    "INT64": (np.dtype(np.int64), TensorProto.INT64),
    "FP16": (np.dtype(np.float16), TensorProto.FLOAT16),
    "FP32": (np.dtype(np.float32), TensorProto.FLOAT),
    "FP64": (np.dtype(np.float64), TensorProto.DOUBLE),
    "BF16": (np.dtype(ml_dtypes.bfloat16), TensorProto.BFLOAT16),
}


class TinyBert(nn.Module):
    """BERT's three int64 inputs [batch, sequence]; token and segment embeddings, a mask and
    a linear head. Outputs per-token ``logits`` and a masked-mean ``pooled`` vector."""

    def __init__(self, vocab: int = VOCAB, hidden: int = 16, labels: int = 4) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, hidden)
        self.segments = nn.Embedding(2, hidden)
        self.head = nn.Linear(hidden, labels)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        mask = attention_mask.unsqueeze(-1).to(torch.float32)
        logits = self.head((self.tokens(input_ids) + self.segments(token_type_ids)) * mask)
        pooled = (logits * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        return logits, pooled


class SlowCNN(nn.Module):
    """Plain 3x3 convolutions at 128x128: tens of milliseconds per image on two cores, so a
    queue fills up and a shutdown finds requests in flight."""

    def __init__(self, width: int = 32, depth: int = 12) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, width, 3, padding=1)
        self.body = nn.Sequential(
            *[nn.Sequential(nn.Conv2d(width, width, 3, padding=1), nn.ReLU()) for _ in range(depth)]
        )
        self.head = nn.Linear(width, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(torch.relu(self.stem(x))).mean((2, 3)))


def cnn_model(seed: int) -> onnx.ModelProto:
    torch.manual_seed(seed)
    example = torch.randn(1, *CNN_IMAGE)
    return torch_models.export(torch_models.SmallCNN(), (example,), OPSET, ["input"])


def slow_model() -> onnx.ModelProto:
    torch.manual_seed(2)
    return torch_models.export(SlowCNN(), (torch.randn(1, *SLOW_IMAGE),), OPSET, ["input"])


def bert_model() -> onnx.ModelProto:
    torch.manual_seed(3)
    names = ["input_ids", "attention_mask", "token_type_ids"]
    outputs = ["logits", "pooled"]
    axes = {n: {0: "batch", 1: "sequence"} for n in [*names, "logits"]}
    axes["pooled"] = {0: "batch"}
    return torch_models.export(TinyBert(), bert_inputs(1), OPSET, names, outputs, dynamic_axes=axes)


def bert_inputs(batch: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    ids, mask = torch_models.bert_inputs(batch, SEQUENCE, VOCAB, seed)
    segments = (torch.arange(SEQUENCE) >= SEQUENCE // 2).to(torch.int64).expand(batch, -1)
    return ids, mask, segments.contiguous()


def identity_model() -> onnx.ModelProto:
    """One Identity per KServe datatype: input ``in_<TYPE>`` [-1, 3] -> ``out_<TYPE>``."""
    nodes, inputs, outputs = [], [], []
    for name, (_, code) in DATATYPES.items():
        nodes.append(helper.make_node("Identity", [f"in_{name}"], [f"out_{name}"]))
        inputs.append(helper.make_tensor_value_info(f"in_{name}", code, ["n", 3]))
        outputs.append(helper.make_tensor_value_info(f"out_{name}", code, ["n", 3]))
    graph = helper.make_graph(nodes, "identities", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])


def string_model() -> onnx.ModelProto:
    """ONNX STRING (KServe BYTES) in and out: ``text`` [n, 2] -> ``is_cat`` (Equal against a
    string initializer, BOOL [n, 2]) and ``echo`` (``text`` with its columns swapped and
    appended by Gather, Concat and Identity, STRING [n, 4]). Opset 19: Equal takes strings."""
    nodes = [
        helper.make_node("Equal", ["text", "cat"], ["is_cat"]),
        helper.make_node("Gather", ["text", "swap"], ["swapped"], axis=1),
        helper.make_node("Concat", ["text", "swapped"], ["joined"], axis=1),
        helper.make_node("Identity", ["joined"], ["echo"]),
    ]
    constants = [
        numpy_helper.from_array(np.array(["cat"], dtype=object), "cat"),
        numpy_helper.from_array(np.array([1, 0], dtype=np.int64), "swap"),
    ]
    graph = helper.make_graph(
        nodes,
        "strings",
        [helper.make_tensor_value_info("text", TensorProto.STRING, ["n", 2])],
        [
            helper.make_tensor_value_info("is_cat", TensorProto.BOOL, ["n", 2]),
            helper.make_tensor_value_info("echo", TensorProto.STRING, ["n", 4]),
        ],
        constants,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


LABELS = np.array(["bird", "cat", "dog"])
FEATURES = 4


def labelled_features(rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Float32 features and the string label of their largest one of the first three."""
    x = np.random.default_rng(seed).standard_normal((rows, FEATURES)).astype(np.float32)
    return x, LABELS[np.argmax(x[:, :3], axis=1)]


def fitted_classifier():
    """A scikit-learn LogisticRegression fitted on string labels (the same every call)."""
    from sklearn.linear_model import LogisticRegression

    x, y = labelled_features(90, seed=11)
    return LogisticRegression(max_iter=500).fit(x, y)


def classifier_model() -> onnx.ModelProto:
    """:func:`fitted_classifier` converted by skl2onnx without ZipMap: ``X`` [n, 4] FP32 ->
    ``label`` [n] STRING and ``probabilities`` [n, 3] FP32."""
    from skl2onnx import to_onnx

    model = fitted_classifier()
    example = np.zeros((1, FEATURES), np.float32)
    return to_onnx(model, example, options={id(model): {"zipmap": False}})


def write_model(root: Path, name: str, version: int, model: onnx.ModelProto, config=None) -> Path:
    folder = root / name / str(version)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.onnx"
    onnx.save(model, path)
    if config is not None:
        (root / name / "config.json").write_text(json.dumps(config))
    return path


CHECKPOINT_CONFIG = {
    "model_class": "sonnx.walkthrough:LayerCNN",
    "inputs": {"image": {"shape": [-1, 1, 28, 28]}},
}


def write_checkpoint(root: Path, name: str, version: int) -> Path:
    """A trained-from-seed ``LayerCNN`` saved with ``save_states`` as ``model.sonnx``."""
    from sonnx.tensor import Tensor
    from sonnx.walkthrough import LayerCNN

    folder = root / name / str(version)
    folder.mkdir(parents=True, exist_ok=True)
    model = LayerCNN()
    example = Tensor(data=np.zeros((2, 1, 28, 28), np.float32), requires_grad=False)
    model.compile([example], is_train=False)
    model.save_states(folder / "model.sonnx")
    (root / name / "config.json").write_text(json.dumps(CHECKPOINT_CONFIG))
    return folder / "model.sonnx"


class ServerProcess:
    """``python -m sonnx serve`` in a subprocess on a free loopback port; a thread collects its
    JSON log lines so tests can wait for events (listening, models loaded) instead of sleeping.
    """

    def __init__(self, repository: Path, *extra: str, startup_s: float = 90.0) -> None:
        command = [sys.executable, "-m", "sonnx", "serve", "--model-repository", str(repository)]
        command += ["--host", "127.0.0.1", "--http-port", "0", *extra]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env.pop("SONNX_API_KEY", None)
        self.proc = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env
        )
        self.lines: queue.Queue[dict | None] = queue.Queue()
        self.log: list[dict] = []
        threading.Thread(target=self._read, daemon=True).start()
        try:
            self.port = self.wait_for("listening", startup_s)["port"]
            self.wait_for("models_loaded", startup_s)
        except BaseException:
            self.stop()
            raise
        self.url = f"127.0.0.1:{self.port}"

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                entry = {"raw": line.rstrip()}
            self.log.append(entry)
            self.lines.put(entry)
        self.lines.put(None)

    def wait_for(self, event: str, timeout: float) -> dict:
        """The next log entry whose ``event`` field is ``event``."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"server logged no {event!r} within {timeout} s: {self.log}")
            entry = self.lines.get(timeout=remaining)
            if entry is None:
                raise RuntimeError(
                    f"server exited ({self.proc.wait()}) before {event!r}: {self.log}"
                )
            if entry.get("event") == event:
                return entry

    def logged(self, event: str) -> dict:
        """The first log entry (already read) whose ``event`` field is ``event``."""
        return next(entry for entry in self.log if entry.get("event") == event)

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.proc.wait()


@contextlib.contextmanager
def thread_server(app) -> Iterator[int]:
    """uvicorn in a thread of this process on a free loopback port (signals stay ours)."""
    sock = bind_socket("127.0.0.1", 0)
    config = uvicorn.Config(app, log_config=None, access_log=False, lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not server.started:  # the lifespan has started the app's services (gRPC)
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)
        yield sock.getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()
    assert not thread.is_alive()


def http(
    port: int,
    method: str,
    path: str,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    timeout: float = 30.0,
) -> tuple[int, dict[str, str], bytes]:
    """One plain HTTP/1.1 request (status, lower-cased headers, body) with http.client."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        data = response.read()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, data
    finally:
        conn.close()


def stream_request(
    port: int, head: bytes, chunks: Iterable[bytes], timeout: float = 30.0
) -> tuple[int, bytes]:
    """Send ``head`` then ``chunks`` until the server answers (it may answer early and close);
    the status and the raw response."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(head)
        for chunk in chunks:
            if select.select([sock], [], [], 0)[0]:
                break  # the server has answered already
            try:
                sock.sendall(chunk)
            except (BrokenPipeError, ConnectionResetError):
                break
        response = b""
        with contextlib.suppress(ConnectionResetError):
            while b"\r\n\r\n" not in response or not _complete(response):
                data = sock.recv(65536)
                if not data:
                    break
                response += data
    status = int(response.split(b" ", 2)[1]) if response.startswith(b"HTTP/") else 0
    return status, response


def _complete(response: bytes) -> bool:
    head, _, body = response.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(body) >= int(value)
    return False


def infer_body(name: str, array: np.ndarray, datatype: str = "FP32") -> bytes:
    """A JSON inference request with one input."""
    return json.dumps(
        {
            "inputs": [
                {
                    "name": name,
                    "shape": list(array.shape),
                    "datatype": datatype,
                    "data": array.reshape(-1).tolist(),
                }
            ]
        }
    ).encode()


def binary_infer_body(name: str, array: np.ndarray, datatype: str = "FP32") -> tuple[bytes, str]:
    """A binary-tensor-data request with one input, and its Inference-Header-Content-Length."""
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": name,
                    "shape": list(array.shape),
                    "datatype": datatype,
                    "parameters": {"binary_data_size": array.nbytes},
                }
            ],
            "outputs": [{"name": "output", "parameters": {"binary_data": True}}],
        }
    ).encode()
    return header + array.tobytes(), str(len(header))


def binary_output(body: bytes, header_length: str, shape: tuple[int, ...]) -> np.ndarray:
    """The one FP32 binary output of a response made for :func:`binary_infer_body`."""
    return np.frombuffer(body[int(header_length) :], np.float32).reshape(shape)


def metric(port: int, name: str, **labels: str) -> float:
    """One sample of the server's /metrics (0 if absent)."""
    from prometheus_client.parser import text_string_to_metric_families

    _, _, body = http(port, "GET", "/metrics")
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return 0.0
