"""The ``sonnx`` console command: thin subcommands over the library.

sonnx --version
sonnx demo [--epochs N] [--limit N] [--data DIR] [--out DIR]   the walkthrough (main job)
sonnx info MODEL.onnx                                         layers, inputs, outputs, params
sonnx run MODEL.onnx INPUT.npy [...] [--output NAME] [--cast] run a model on .npy inputs
sonnx serve --model-repository DIR [--http-port 8000] [--grpc-port 8001]  KServe v2 server
sonnx cache [--clear]                                         graph mode's stored graphs
sonnx generate DIR --prompt "..." [--device D] [--graph]    stream generated text
sonnx quantize MODEL OUT (--calibration DIR | --weights-only)  int8 QDQ or int4 MatMulNBits

Every option's ``--help`` line ends in its default. Output into a closed pipe
(``sonnx info model.onnx | head -1``) ends the command quietly.

``demo`` and ``serve`` are whole programs that run models for their lifetime: they opt in to
:func:`sonnx.tune_process_for_serving` (malloc and garbage-collector settings).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from sonnx import dtypes
from sonnx.cli_quantize import add_arguments as add_quantize_arguments
from sonnx.errors import BadInputError, SonnxError
from sonnx.generation.command import add_parser as add_generate_parser
from sonnx.process_tuning import tune_process_for_serving
from sonnx.version import package_version


def _demo(args: argparse.Namespace) -> int:
    from sonnx.walkthrough import format_table, run_walkthrough

    tune_process_for_serving()
    results = run_walkthrough(
        Path(args.out),
        epochs=args.epochs,
        limit=args.limit,
        data_dir=args.data,
        batch_size=args.batch_size,
        lr=args.lr,
        progress=not args.no_progress,
    )
    print()
    print(format_table(results))
    print(f"\nwrote {args.out}/mnist.onnx, {args.out}/transfer.onnx, {args.out}/curves.png")
    return 0


def _model_file(given: str) -> str:
    """The ONNX file ``given`` names: itself, or for an onnxruntime-genai or optimum model
    directory the decoder file its ``genai_config.json`` (or optimum's file names) gives."""
    path = Path(given)
    if not path.is_dir():
        return given
    from sonnx.generation.model_dir import decoder_file

    try:
        found = decoder_file(path)
    except BadInputError:
        raise BadInputError(
            f"{given} is a directory, expected an .onnx file or a model directory with "
            "genai_config.json (onnxruntime-genai) or model.onnx (optimum)"
        ) from None
    print(f"model:   {found}")
    return str(found)


def _info(args: argparse.Namespace) -> int:
    from sonnx.runtime.rep import prepare

    rep = prepare(_model_file(args.model))
    print(f"inputs:  {', '.join(f'{s.name}: {s.describe()}' for s in rep.input_specs)}")
    declared = {v.name: v.type.tensor_type.elem_type for v in rep.model.graph.output}
    outputs = [
        f"{name}: {dtypes.dtype_name(declared.get(name) or None)} {rep.shapes.get(name, '?')}"
        for name in rep.outputs
    ]
    print(f"outputs: {', '.join(outputs)}")
    params = rep.params
    count = sum(t.size() for t in params.values())
    print(f"parameters: {len(params)} tensors, {count:,} values\n")
    print(rep.summary())
    return 0


def _run(args: argparse.Namespace) -> int:
    from sonnx.cli_run import load_inputs, print_outputs, run_outputs, save_outputs
    from sonnx.runtime.rep import prepare

    rep = prepare(_model_file(args.model))
    arrays = load_inputs(rep, args.inputs, args.cast)
    outputs = run_outputs(rep, arrays, args.output, args.last_layers)
    print_outputs(outputs, args.threshold)
    if args.save:
        save_outputs(outputs, args.save)
    return 0


def _serve(args: argparse.Namespace) -> int:
    from sonnx.serve import run_server

    tune_process_for_serving()
    return run_server(
        args.model_repository,
        host=args.host,
        port=args.http_port,
        grpc_port=args.grpc_port,
        api_key=args.api_key or os.environ.get("SONNX_API_KEY") or None,
        max_request_mb=args.max_request_mb,
        shutdown_timeout=args.shutdown_timeout,
        log_level=args.log_level,
        strict_readiness=not args.no_strict_readiness,
    )


def _cache(args: argparse.Namespace) -> int:
    from sonnx.runtime.store import ENV_VAR, GraphStore

    store = GraphStore.from_environment()
    if store.root is None:
        print(f"graph mode stores no compiled graphs (${ENV_VAR} is off)")
        return 0
    if args.clear:
        files, size = store.clear()
        print(f"removed {files} files ({size:,} bytes) from {store.root}")
    count, size = store.usage()
    print(f"{store.root}: {count} compiled graphs, {size / 2**20:.1f} MiB")
    return 0


class _HelpWithDefaults(argparse.HelpFormatter):
    """Help whose every option line ends in its default, where it has one (not a flag's
    False, not None or an empty list: those options say in their help what leaving them out
    does)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            "%(default)" in text
            or not action.option_strings
            or default is None
            or default is False
            or default == []
            or default == argparse.SUPPRESS
        ):
            return text
        return f"{text} (default: %(default)s)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sonnx",
        description="ONNX as a first-class citizen.",
        formatter_class=_HelpWithDefaults,
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"sonnx {package_version()}",
        help="print sonnx's version and exit",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, text: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=text, description=text, formatter_class=_HelpWithDefaults)

    demo = command("demo", "train -> export -> re-import -> re-train -> transfer, on MNIST")
    demo.add_argument(
        "--epochs", type=int, default=1, metavar="N", help="epochs per training stage"
    )
    demo.add_argument(
        "--limit",
        type=int,
        default=None,
        metavar="N",
        help="use only the first N images of the training set and of the test set (at least "
        "one batch); default: all",
    )
    demo.add_argument(
        "--data",
        default=None,
        metavar="DIR",
        help="a directory of MNIST-format idx files; default: Fashion-MNIST where installed, "
        "else scikit-learn's digits",
    )
    demo.add_argument(
        "--out", default="out", metavar="DIR", help="where to write the models and curves"
    )
    demo.add_argument(
        "--batch-size", type=int, default=64, metavar="N", help="images per training step"
    )
    demo.add_argument("--lr", type=float, default=0.05, help="SGD's learning rate, momentum 0.9")
    demo.add_argument("--no-progress", action="store_true", help="no progress bars")
    demo.set_defaults(func=_demo)
    info = command("info", "describe an ONNX model as sonnx imports it")
    info.add_argument(
        "model", help="an .onnx file, or an onnxruntime-genai or optimum model directory"
    )
    info.set_defaults(func=_info)
    run = command("run", "run an ONNX model on .npy inputs; print and save its outputs")
    run.add_argument(
        "model", help="an .onnx file, or an onnxruntime-genai or optimum model directory"
    )
    run.add_argument("inputs", nargs="+", help=".npy files, one per model input, in order")
    cut = run.add_mutually_exclusive_group()
    cut.add_argument(
        "--output",
        action="append",
        default=[],
        metavar="NAME",
        help="return the tensor NAME instead of the model's outputs, stopping once it is "
        "computed (`sonnx info` lists each node's outputs); repeat for several; default: the "
        "model's outputs",
    )
    cut.add_argument(
        "--last-layers",
        type=int,
        default=-1,
        metavar="K",
        help="-1 runs the whole model; -k stops k-1 layers early (the 'cut' column of "
        "`sonnx info`)",
    )
    run.add_argument(
        "--cast",
        action="store_true",
        help="cast a float .npy file to the float type its input declares (float64 -> "
        "float32), with a note; without it such a file is an error",
    )
    run.add_argument(
        "--threshold",
        type=int,
        default=1000,
        metavar="N",
        help="print every value of outputs of up to this many values; larger ones are "
        "summarised (NumPy's print threshold)",
    )
    run.add_argument(
        "--save",
        default=None,
        metavar="PREFIX",
        help="save each output as PREFIX_<output name>.npy (the name's characters other than "
        "letters, digits, _ . - become _); default: save nothing",
    )
    run.set_defaults(func=_run)
    serve = command(
        "serve", "serve a model repository over the KServe v2 (Open Inference) protocol"
    )
    serve.add_argument(
        "--model-repository",
        required=True,
        metavar="DIR",
        help="DIR with <model>/<version>/model.onnx",
    )
    serve.add_argument(
        "--http-port", type=int, default=8000, metavar="PORT", help="0 picks a free port"
    )
    serve.add_argument(
        "--grpc-port",
        type=int,
        default=None,
        metavar="PORT",
        help="also serve the KServe v2 gRPC protocol on this port (Triton's: 8001; 0 picks a "
        "free port); default: HTTP only",
    )
    serve.add_argument("--host", default="127.0.0.1", help="0.0.0.0 to listen on every interface")
    serve.add_argument(
        "--api-key",
        default=None,
        metavar="KEY",
        help="require this key (default: $SONNX_API_KEY, else none)",
    )
    serve.add_argument(
        "--max-request-mb",
        type=float,
        default=64.0,
        metavar="MIB",
        help="request body limit in MiB",
    )
    serve.add_argument(
        "--shutdown-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="seconds in-flight requests may take",
    )
    serve.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="the server's log level",
    )
    serve.add_argument(
        "--no-strict-readiness",
        action="store_true",
        help="/v2/health/ready answers ready once the start-up load has finished, even while "
        "a model failed to load; default: ready only while every model serves (Triton's "
        "strict readiness)",
    )
    serve.set_defaults(func=_serve)
    cache = command("cache", "where graph mode stores compiled graphs, and how much")
    cache.add_argument(
        "--clear", action="store_true", help="delete every stored graph first and say what went"
    )
    cache.set_defaults(func=_cache)
    add_generate_parser(sub)
    add_quantize_arguments(
        command("quantize", "quantize a float model: int8 QDQ from .npy feeds, or int4 weights")
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:
        # The reader of stdout went away (`sonnx info model.onnx | head -1`): stop quietly, as
        # `cat` does. stdout is pointed at devnull so that its flush at exit finds no pipe.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


def _main(argv: list[str] | None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return args.func(args)
    except SonnxError as e:
        print(f"sonnx: error: {e}", file=sys.stderr)
        return 2
    finally:
        sys.stdout.flush()  # a closed pipe shows here, where main catches it, not at exit


if __name__ == "__main__":
    raise SystemExit(main())
