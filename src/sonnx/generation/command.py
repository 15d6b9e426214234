"""``sonnx generate DIR --prompt "..."``: text in, streamed text out.

The prompt is tokenized with the directory's ``tokenizer.json``, and each piece of text is
written to standard output as soon as its token is chosen. A directory without a tokenizer
takes ``--ids 1 5 9`` and prints token ids: the prompt's, then each new one as it comes, the
ids :meth:`SingaRep.generate` returns (``--prompt`` prints only the new text, as
:func:`sonnx.generate` returns it for text). Token ids outside the vocabulary, and a
``--max-new-tokens`` past the model's context length, are refused before anything runs
(:mod:`sonnx.generation.limits`). ``--device cuda`` runs on a GPU,
``--graph`` in graph mode, and ``--cuda-graph`` (with both) replays each decode step as a CUDA
graph: see :func:`sonnx.generation.decode_steps.check_cuda_graph` for the models it holds for.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from sonnx.device import Device, require_cuda
from sonnx.errors import BadInputError
from sonnx.generation.limits import check_context, check_token_ids
from sonnx.generation.model_dir import load_decoder
from sonnx.generation.text import TextStreamer


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register the ``generate`` subcommand on ``sub``."""
    cmd = sub.add_parser("generate", help="generate text with a decoder model directory")
    cmd.add_argument("model_dir", help="onnxruntime-genai's or optimum's decoder directory")
    cmd.add_argument(
        "--prompt",
        default=None,
        help="text, tokenized with DIR's tokenizer.json (default: none; give it or --ids)",
    )
    cmd.add_argument(
        "--ids",
        type=int,
        nargs="+",
        default=None,
        help="prompt token ids; prints the prompt's ids, then each new id as it comes, as "
        "SingaRep.generate returns them (default: none; give it or --prompt)",
    )
    cmd.add_argument(
        "--max-new-tokens",
        type=int,
        default=64,
        help="tokens to generate; with the prompt at most the model's context length (default: 64)",
    )
    cmd.add_argument("--do-sample", action="store_true", help="sample instead of greedy")
    cmd.add_argument(
        "--temperature", type=float, default=1.0, help="sampling temperature (default: 1.0)"
    )
    cmd.add_argument(
        "--top-k", type=int, default=0, help="sample among the k likeliest, 0: all (default: 0)"
    )
    cmd.add_argument(
        "--top-p",
        type=float,
        default=1.0,
        help="sample within this probability mass (default: 1.0)",
    )
    cmd.add_argument(
        "--seed",
        type=int,
        default=None,
        help="makes sampling reproducible (default: none, a fresh draw each run)",
    )
    cmd.add_argument(
        "--device", default="cpu", help="where to run: cpu, cuda or cuda:N (default: cpu)"
    )
    cmd.add_argument(
        "--graph",
        "--use-graph",
        dest="use_graph",
        action="store_true",
        help="run compiled: one graph for the prompt, one for the decode step (default: off)",
    )
    cmd.add_argument(
        "--cuda-graph",
        action="store_true",
        help="capture the decode step as a CUDA graph and replay it for every token; needs "
        "--graph, a CUDA --device and onnxruntime-genai's shared KV buffer (default: off)",
    )
    cmd.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if (args.prompt is None) == (args.ids is None):
        raise BadInputError("generate: give exactly one of --prompt TEXT and --ids N [N ...]")
    device = _device(args.device)
    if args.cuda_graph and not args.use_graph:
        raise BadInputError("generate: --cuda-graph captures graph mode's decode step; add --graph")
    if args.cuda_graph and not device.is_cuda():
        raise BadInputError(
            f"generate: --cuda-graph needs a CUDA --device (cuda or cuda:N), received --device "
            f"{args.device}"
        )
    model = load_decoder(args.model_dir, device=device, use_graph=args.use_graph)
    if args.prompt is not None:
        if model.tokenizer is None:
            raise BadInputError(
                f"generate: {args.model_dir} has no tokenizer.json; give --ids instead of --prompt"
            )
        ids = model.tokenizer.encode(args.prompt)
        streamer = TextStreamer(model.tokenizer, _write)
    else:
        ids = args.ids
        limits = model.layout.limits
        check_token_ids(np.asarray(ids), limits.vocab_size)
        check_context(len(ids), args.max_new_tokens, limits.context_length)
        _write("".join(f"{i} " for i in ids))  # the prompt first, as the API returns it

        def streamer(tokens: np.ndarray) -> None:
            _write(f"{int(tokens[0])} ")

    model.generate(
        ids,
        max_new_tokens=args.max_new_tokens,
        do_sample=args.do_sample,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        seed=args.seed,
        streamer=streamer,
        cuda_graph=args.cuda_graph,
    )
    if isinstance(streamer, TextStreamer):
        streamer.finish()
    _write("\n")
    return 0


def _device(name: str) -> Device:
    """``--device``'s device: the CPU, or a CUDA GPU that torch sees."""
    device = Device(name)
    kind = device.torch_device.type
    if kind not in ("cpu", "cuda"):
        raise BadInputError(f"generate: --device must be cpu, cuda or cuda:N, received {name!r}")
    if kind == "cuda":
        require_cuda(device.torch_device.index, f"generate: --device {name}", "use --device cpu")
    return device


def _write(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()
