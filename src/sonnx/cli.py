"""The ``sonnx`` console command: thin subcommands over the library.

sonnx demo [--epochs N] [--limit N] [--data DIR] [--out DIR]   the walkthrough (main job)
sonnx info MODEL.onnx                                         layers, inputs, outputs, params
sonnx run MODEL.onnx INPUT.npy [...] [--last-layers K]        run a model on .npy inputs
sonnx serve --model-repository DIR [--http-port 8000] [--grpc-port 8001]  KServe v2 server
sonnx cache [--clear]                                         graph mode's stored graphs
sonnx generate DIR --prompt "..." [--max-new-tokens N]       stream generated text

``demo`` and ``serve`` are whole programs that run models for their lifetime: they opt in to
:func:`sonnx.tune_process_for_serving` (malloc and garbage-collector settings).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

from sonnx.errors import SonnxError
from sonnx.generation.command import add_parser as add_generate_parser
from sonnx.process_tuning import tune_process_for_serving


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


def _info(args: argparse.Namespace) -> int:
    from sonnx.onnx.importer import prepare

    rep = prepare(args.model)
    print(f"inputs:  {', '.join(f'{s.name}: {s.describe()}' for s in rep.input_specs)}")
    print(f"outputs: {', '.join(rep.outputs)}")
    params = rep.params
    count = sum(t.size() for t in params.values())
    print(f"parameters: {len(params)} tensors, {count:,} values\n")
    print(rep.summary())
    return 0


def _run(args: argparse.Namespace) -> int:
    from sonnx.onnx.importer import prepare
    from sonnx.tensor import to_numpy

    rep = prepare(args.model)
    arrays = [np.load(p, allow_pickle=False) for p in args.inputs]
    outputs = rep.run(arrays, last_layers=args.last_layers)
    for i, t in enumerate(outputs):
        array = to_numpy(t)
        print(f"output {i} ({t.name}): {array.dtype} {array.shape}")
        if args.save:
            np.save(f"{args.save}_{i}.npy", array)
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
    )


def _cache(args: argparse.Namespace) -> int:
    from sonnx.onnx.graph_store import ENV_VAR, GraphStore

    store = GraphStore.from_environment()
    if store.root is None:
        print(f"graph mode stores no compiled graphs (${ENV_VAR} is off)")
        return 0
    if args.clear:
        store.clear()
    count, size = store.usage()
    print(f"{store.root}: {count} compiled graphs, {size / 2**20:.1f} MiB")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sonnx", description="ONNX as a first-class citizen.")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="train -> export -> re-import -> re-train -> transfer")
    demo.add_argument("--epochs", type=int, default=1, help="epochs per training stage")
    demo.add_argument("--limit", type=int, default=None, help="use only the first N images")
    demo.add_argument("--data", default=None, help="a directory of MNIST-format idx files")
    demo.add_argument("--out", default="out", help="where to write the models and curves")
    demo.add_argument("--batch-size", type=int, default=64)
    demo.add_argument("--lr", type=float, default=0.05)
    demo.add_argument("--no-progress", action="store_true", help="no progress bars")
    demo.set_defaults(func=_demo)
    info = sub.add_parser("info", help="describe an ONNX model as sonnx imports it")
    info.add_argument("model")
    info.set_defaults(func=_info)
    run = sub.add_parser("run", help="run an ONNX model on .npy inputs")
    run.add_argument("model")
    run.add_argument("inputs", nargs="+", help=".npy files, one per model input")
    run.add_argument("--last-layers", type=int, default=-1)
    run.add_argument("--save", default=None, help="prefix for .npy files of the outputs")
    run.set_defaults(func=_run)
    serve = sub.add_parser(
        "serve", help="serve a model repository over the KServe v2 (Open Inference) protocol"
    )
    serve.add_argument(
        "--model-repository", required=True, help="DIR with <model>/<version>/model.onnx"
    )
    serve.add_argument("--http-port", type=int, default=8000, help="0 picks a free port")
    serve.add_argument(
        "--grpc-port",
        type=int,
        default=None,
        help="also serve the KServe v2 gRPC protocol on this port (Triton's: 8001; 0 picks a "
        "free port); default: HTTP only",
    )
    serve.add_argument("--host", default="127.0.0.1", help="0.0.0.0 to listen on every interface")
    serve.add_argument(
        "--api-key", default=None, help="require this key (default: $SONNX_API_KEY, else none)"
    )
    serve.add_argument("--max-request-mb", type=float, default=64.0, help="request body limit")
    serve.add_argument(
        "--shutdown-timeout", type=float, default=30.0, help="seconds in-flight requests may take"
    )
    serve.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    serve.set_defaults(func=_serve)
    cache = sub.add_parser("cache", help="where graph mode stores compiled graphs, and how much")
    cache.add_argument("--clear", action="store_true", help="delete every stored graph first")
    cache.set_defaults(func=_cache)
    add_generate_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except SonnxError as e:
        print(f"sonnx: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
