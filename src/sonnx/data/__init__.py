"""Datasets for the walkthrough and the tests: MNIST-format idx files, with fallbacks."""

from sonnx.data.mnist import Dataset, load_dataset, read_idx

__all__ = ["Dataset", "load_dataset", "read_idx"]
