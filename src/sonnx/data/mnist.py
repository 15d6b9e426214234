"""MNIST-format data: any directory of idx files, Debian's Fashion-MNIST, or sklearn's digits.

The default is Fashion-MNIST from Debian's ``dataset-fashion-mnist`` package (real 60k/10k
images); where it is not installed, scikit-learn's bundled 8x8 digits are scaled to 28x28 so that
the same 28x28 networks train on them. Nothing is downloaded.
"""

from __future__ import annotations

import gzip
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sonnx.errors import BadInputError

FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")
_IDX_TYPES = {
    0x08: np.uint8,
    0x09: np.int8,
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
_FILES = {
    "train_x": "train-images-idx3-ubyte",
    "train_y": "train-labels-idx1-ubyte",
    "test_x": "t10k-images-idx3-ubyte",
    "test_y": "t10k-labels-idx1-ubyte",
}


@dataclass
class Dataset:
    """Images as float32 (N, 1, 28, 28) in [0, 1]; labels as int64 (N,)."""

    name: str
    train_x: np.ndarray
    train_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray
    num_classes: int = 10

    def limited(self, limit: int | None) -> Dataset:
        """The first ``limit`` training and test examples (all when None)."""
        if limit is None:
            return self
        return Dataset(
            self.name,
            self.train_x[:limit],
            self.train_y[:limit],
            self.test_x[:limit],
            self.test_y[:limit],
            self.num_classes,
        )


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read one idx file (optionally gzip-compressed) into an array of its stored type."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            data = f.read()
    except (OSError, EOFError) as e:
        raise BadInputError(f"cannot read idx file {path}: {e}") from e
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] not in _IDX_TYPES:
        raise BadInputError(f"{path} is not an idx file (bad magic number {data[:4].hex()})")
    dtype, ndim = np.dtype(_IDX_TYPES[data[2]]), data[3]
    header = 4 + 4 * ndim
    dims = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    expected = int(np.prod(dims)) * dtype.itemsize
    if len(data) - header != expected:
        raise BadInputError(
            f"{path}: header says shape {tuple(dims)} ({expected} bytes of data), file has "
            f"{len(data) - header}"
        )
    return (
        np.frombuffer(data, dtype=dtype, offset=header)
        .reshape(dims)
        .astype(dtype.newbyteorder("="))
    )


def _find(directory: Path, stem: str) -> Path:
    for candidate in (directory / stem, directory / (stem + ".gz")):
        if candidate.is_file():
            return candidate
    raise BadInputError(f"{directory} has no {stem} or {stem}.gz (MNIST idx files expected)")


def load_idx_directory(directory: str | os.PathLike, name: str | None = None) -> Dataset:
    """The four standard MNIST idx files of ``directory`` (plain or .gz)."""
    d = Path(directory)
    arrays = {key: read_idx(_find(d, stem)) for key, stem in _FILES.items()}
    for split in ("train", "test"):
        images, labels = arrays[f"{split}_x"], arrays[f"{split}_y"]
        if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
            raise BadInputError(
                f"{d}: {split} images must be (N, H, W) with N labels, received images "
                f"{images.shape} and labels {labels.shape}"
            )
    return Dataset(
        name or d.name,
        (arrays["train_x"][:, None] / np.float32(255)).astype(np.float32),
        arrays["train_y"].astype(np.int64),
        (arrays["test_x"][:, None] / np.float32(255)).astype(np.float32),
        arrays["test_y"].astype(np.int64),
    )


def load_digits_28() -> Dataset:
    """scikit-learn's 1,797 bundled 8x8 digits, scaled to 28x28 and split 80/20."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = digits.images.astype(np.float32) / 16.0
    big = np.kron(images, np.ones((3, 3), dtype=np.float32))  # 24x24
    big = np.pad(big, ((0, 0), (2, 2), (2, 2)))[:, None]
    labels = digits.target.astype(np.int64)
    order = np.random.default_rng(0).permutation(len(labels))
    cut = int(0.8 * len(labels))
    train, test = order[:cut], order[cut:]
    return Dataset("sklearn-digits", big[train], labels[train], big[test], labels[test])


def load_dataset(data_dir: str | os.PathLike | None = None) -> Dataset:
    """``data_dir``'s idx files if given, else Fashion-MNIST if installed, else digits."""
    if data_dir is not None:
        return load_idx_directory(data_dir)
    if FASHION_MNIST_DIR.is_dir():
        return load_idx_directory(FASHION_MNIST_DIR, "fashion-mnist")
    return load_digits_28()
