"""Fuzz cases whose weights live in external data files, most of them pointing elsewhere.

Every case is laid out the same way by the runner (see :func:`write_case`)::

    root/outside.bin          the weight bytes again, outside the model's directory
    root/model/model.onnx     the model, its largest initializer stored externally
    root/model/weights.bin    the weight bytes, after a few bytes of padding
    root/model/link.bin       a symbolic link to ../outside.bin

so a reference that escapes the model's directory would find loadable bytes: only a check of
the location itself can refuse it. Every case but the plain one must fail with a typed error
that names the external data.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import TYPE_CHECKING

import onnx
from onnx import TensorProto

if TYPE_CHECKING:
    from tests.fuzz.mutations import Case
    from tests.fuzz.seeds import Seed

PADDING = 16
MODEL_FILE = "model/model.onnx"
#: (location, offset, length) of the refused references; None: the valid value.
REFUSED: list[tuple[str, int | str | None, int | str | None]] = [
    ("../outside.bin", None, None),
    ("../../etc/passwd", None, None),
    ("/etc/passwd", None, None),
    ("/proc/self/environ", None, None),
    ("link.bin", 0, None),
    ("sub/../../outside.bin", None, None),
    ("./../outside.bin", None, None),
    ("..\\outside.bin", None, None),
    ("C:\\Windows\\win.ini", None, None),
    ("file:///etc/passwd", None, None),
    ("", None, None),
    ("missing.bin", None, None),
    (".", None, None),
    ("weights.bin\x00.txt", None, None),
    ("weights.bin", 10**9, None),
    ("weights.bin", -4, None),
    ("weights.bin", None, 10**9),
    ("weights.bin", None, "many"),
]


def external_case(rng: random.Random, case_id: str, seed: Seed) -> Case:
    """A valid external-data layout (about one case in five) or one of :data:`REFUSED`."""
    from tests.fuzz.mutations import Case

    model = onnx.load_from_string(seed.model)
    weight = max(model.graph.initializer, key=lambda t: len(t.raw_data))
    data = weight.raw_data
    files = {"outside.bin": data, "model/weights.bin": b"\0" * PADDING + data}
    as_bytes = rng.random() < 0.1
    if rng.random() < 0.2:
        location, offset, length = "weights.bin", PADDING, len(data)
        must_fail = as_bytes
    else:
        location, offset, length = rng.choice(REFUSED)
        offset = PADDING if offset is None else offset
        length = len(data) if length is None else length
        must_fail = True
    _make_external(weight, location, offset, length)
    what = f"external data {location!r} offset {offset} length {length}"
    if as_bytes:
        serialized = model.SerializeToString()
        return Case(case_id, f"cnn: {what}, as bytes", serialized, dict(seed.feeds), must_fail=True)
    files[MODEL_FILE] = model.SerializeToString()
    return Case(case_id, f"cnn: {what}", b"", dict(seed.feeds), files, must_fail)


def _make_external(t: TensorProto, location: str, offset: int | str, length: int | str) -> None:
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    del t.external_data[:]
    for key, value in (("location", location), ("offset", offset), ("length", length)):
        entry = t.external_data.add()
        entry.key, entry.value = key, str(value)


def write_case(root: Path, files: dict[str, bytes]) -> Path:
    """Lay a case's files out under ``root``; the path of its model."""
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    (root / "model" / "link.bin").symlink_to(Path("..") / "outside.bin")
    return root / MODEL_FILE
