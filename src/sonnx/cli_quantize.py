"""``sonnx quantize``: a float ONNX model quantized and written to a new file.

- ``sonnx quantize MODEL OUT --calibration DIR`` calls
  :func:`sonnx.quantization.quantize_static` (int8 QDQ by default) on the feeds in ``DIR``,
  with a progress bar of the feeds calibrated.
- ``sonnx quantize MODEL OUT --weights-only --bits 4`` calls
  :func:`sonnx.quantization.quantize_weights` (MatMulNBits, no calibration).

The calibration folder holds ``.npy`` files, one feed (one batch) each:

- a model with one input: every ``*.npy`` file in ``DIR`` is one feed of that input, taken in
  file-name order, whatever the file is called;
- a model with several inputs: ``DIR`` holds one sub-folder per feed (in name order), each
  with one ``<input name>.npy`` per input (characters of the name other than letters,
  digits, ``_``, ``.`` and ``-`` written as ``_``, as ``sonnx run --save`` names files).
  This form also serves one-input models.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from google.protobuf.message import DecodeError

from sonnx.errors import BadInputError, BadModelError

__all__ = ["add_arguments", "calibration_feeds", "feed_files"]

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
_TYPES = ["int8", "uint8", "int16", "uint16", "int4", "uint4"]


def add_arguments(cmd: argparse.ArgumentParser) -> None:
    """Give the ``quantize`` subcommand's parser its arguments and handler.

    :param cmd: the subcommand's parser (``sonnx quantize``).
    """
    cmd.add_argument("model", help="the float .onnx file")
    cmd.add_argument("out", help="the .onnx file to write")
    cmd.add_argument(
        "--calibration",
        default=None,
        metavar="DIR",
        help="a folder of .npy feeds: one file per feed for a one-input model, else one "
        "sub-folder per feed holding <input name>.npy per input; default: none, which "
        "only --weights-only allows",
    )
    cmd.add_argument("--per-channel", action="store_true", help="one weight scale per channel")
    cmd.add_argument("--weight-type", default="int8", choices=_TYPES, help="weights' type")
    cmd.add_argument("--activation-type", default="int8", choices=_TYPES, help="activations' type")
    cmd.add_argument(
        "--calibrate-method",
        default="minmax",
        choices=["minmax", "percentile", "entropy"],
        help="how each tensor's range is taken from the feeds",
    )
    cmd.add_argument(
        "--reduce-range", action="store_true", help="7-bit weights (x86 CPUs without VNNI)"
    )
    cmd.add_argument(
        "--nodes-to-exclude",
        nargs="+",
        default=[],
        metavar="NAME",
        help="node names left in float (`sonnx info MODEL` lists them); default: none",
    )
    cmd.add_argument(
        "--weights-only",
        action="store_true",
        help="quantize MatMul weights only, to com.microsoft MatMulNBits (no calibration)",
    )
    cmd.add_argument("--bits", type=int, default=4, choices=[4, 8], help="--weights-only bits")
    cmd.add_argument(
        "--block-size", type=int, default=32, metavar="N", help="--weights-only block size"
    )
    cmd.add_argument(
        "--asymmetric",
        action="store_true",
        help="--weights-only: a zero point per block; default: symmetric blocks",
    )
    cmd.add_argument(
        "--accuracy-level",
        type=int,
        default=4,
        metavar="L",
        help="--weights-only: MatMulNBits's accuracy_level (0 writes none)",
    )
    cmd.add_argument("--no-progress", action="store_true", help="no progress bar")
    cmd.set_defaults(func=_quantize)


def _quantize(args: argparse.Namespace) -> int:
    from sonnx.onnx.exporter import save
    from sonnx.quantization import quantize_static, quantize_weights

    model = _load_model(Path(args.model))
    exclude = args.nodes_to_exclude or None
    if args.weights_only:
        if args.calibration is not None:
            raise BadInputError("quantize: --weights-only takes no --calibration feeds")
        quantized = quantize_weights(
            model,
            bits=args.bits,
            block_size=args.block_size,
            symmetric=not args.asymmetric,
            accuracy_level=args.accuracy_level,
            nodes_to_exclude=exclude,
        )
    else:
        if args.calibration is None:
            raise BadInputError(
                "quantize: --calibration DIR is needed (a folder of .npy feeds), or "
                "--weights-only for MatMulNBits weights without calibration"
            )
        inputs = _input_names(model)
        files = feed_files(Path(args.calibration), inputs)
        quantized = quantize_static(
            model,
            _progress(calibration_feeds(files, inputs), len(files), not args.no_progress),
            per_channel=args.per_channel,
            reduce_range=args.reduce_range,
            activation_type=args.activation_type,
            weight_type=args.weight_type,
            nodes_to_exclude=exclude,
            calibrate_method=args.calibrate_method,
        )
    path = save(quantized, args.out)
    counts: dict[str, int] = {}
    for node in quantized.graph.node:
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    quantizers = ("QuantizeLinear", "DequantizeLinear", "MatMulNBits")
    summary = ", ".join(f"{counts[t]} {t}" for t in quantizers if t in counts)
    print(f"wrote {path} ({summary})")
    return 0


def _load_model(path: Path) -> onnx.ModelProto:
    if not path.is_file():
        what = "is a directory" if path.is_dir() else "does not exist"
        raise BadInputError(f"quantize: the model {str(path)!r} {what}; give an .onnx file")
    try:
        return onnx.load(path)
    except (OSError, DecodeError) as error:
        raise BadModelError(f"quantize: cannot read the model {str(path)!r}: {error}") from error


def _input_names(model: onnx.ModelProto) -> list[str]:
    """The graph inputs a feed gives (initializers listed as inputs are not fed)."""
    constants = {t.name for t in model.graph.initializer}
    return [i.name for i in model.graph.input if i.name not in constants]


def feed_files(folder: Path, inputs: list[str]) -> list[dict[str, Path]]:
    """The ``.npy`` file of each input, per feed, found in ``folder`` (see the module's
    docstring for the layout).

    :param folder: the calibration folder.
    :param inputs: the model's input names, in order.
    :returns: one dict per feed, input name to file, in name order.
    :raises BadInputError: the folder is missing or holds no feed; a feed folder misses an
        input's file or holds a file no input is named by; loose files for a model with
        several inputs.
    """
    if not folder.is_dir():
        what = "does not exist" if not folder.exists() else "is not a folder"
        raise BadInputError(f"quantize: --calibration {str(folder)!r} {what}")
    folders = sorted(p for p in folder.iterdir() if p.is_dir())
    loose = sorted(folder.glob("*.npy"))
    if folders and loose:
        raise BadInputError(
            f"quantize: {str(folder)!r} holds both .npy files and sub-folders; use one form "
            f"(files for a one-input model, or a sub-folder per feed), received "
            f"{loose[0].name!r} and {folders[0].name + '/'!r}"
        )
    if loose:
        if len(inputs) != 1:
            raise BadInputError(
                f"quantize: the model has {len(inputs)} inputs {inputs}: put each feed in a "
                f"sub-folder of {str(folder)!r} holding <input name>.npy per input; received "
                f"loose files such as {loose[0].name!r}"
            )
        return [{inputs[0]: path} for path in loose]
    feeds = [_feed_folder(sub, inputs) for sub in folders]
    if not feeds:
        raise BadInputError(
            f"quantize: --calibration {str(folder)!r} holds no .npy file and no sub-folder; "
            "it needs at least one feed"
        )
    return feeds


def _feed_folder(folder: Path, inputs: list[str]) -> dict[str, Path]:
    """One feed's files, by input name, checked against the inputs."""
    wanted = {f"{_UNSAFE.sub('_', name)}.npy": name for name in inputs}
    present = {p.name: p for p in folder.glob("*.npy")}
    unknown = sorted(set(present) - set(wanted))
    if unknown:
        raise BadInputError(
            f"quantize: {str(folder / unknown[0])!r} names no input of the model; the files "
            f"of a feed are {sorted(wanted)}"
        )
    missing = [wanted[f] for f in wanted if f not in present]
    if missing:
        raise BadInputError(
            f"quantize: feed folder {str(folder)!r} has no file for input {missing[0]!r}; "
            f"expected {sorted(wanted)}, received {sorted(present)}"
        )
    return {wanted[f]: present[f] for f in wanted}


def calibration_feeds(
    files: list[dict[str, Path]], inputs: list[str]
) -> Iterator[dict[str, np.ndarray]]:
    """Each feed's arrays, loaded as it is reached (one feed in memory at a time).

    :param files: the feeds' files, from :func:`feed_files`.
    :param inputs: the model's input names, in order.
    :returns: an iterator of feeds, dicts by input name.
    :raises BadInputError: a file that is not a NumPy ``.npy`` array.
    """
    for feed in files:
        yield {name: _load(feed[name]) for name in inputs}


def _load(path: Path) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as error:
        raise BadInputError(
            f"quantize: {str(path)!r} is not a NumPy .npy array file ({error})"
        ) from error


def _progress(feeds: Iterator[Any], total: int, show: bool) -> Iterator[Any]:
    """``feeds`` behind a tqdm bar on stderr when ``show``, tqdm is installed and stderr is a
    terminal."""
    if not show:
        return feeds
    try:
        from tqdm import tqdm
    except ImportError:
        return feeds
    return iter(
        tqdm(feeds, total=total, desc="calibrating", unit="feed", disable=None, file=sys.stderr)
    )
