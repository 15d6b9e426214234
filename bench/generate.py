"""Generation: sonnx's decode loop against onnxruntime-genai's Generator on the same files.

    python bench/generate.py                        # ~100M-parameter llama, fp32 and int4
    python bench/generate.py --layers 2 --hidden 256 --repeats 3   # a quick look
    python bench/generate.py --graph                # graph mode too (compiles first: slow)

A llama config of about 100M parameters (hidden 768, 8 layers, 12 heads over 4 KV heads, MLP
2048, a 32000-token vocabulary; random weights) is saved with transformers and written by
onnxruntime-genai's model builder for the CPU in fp32 and int4 (MatMulNBits, accuracy level
4). Both sides load the builder's directory: sonnx through :func:`sonnx.generation.load_decoder`
(eager, and with ``--graph`` also ``use_graph=True``; for int4 also eagerly with
``kernels="torch"``, the products on torch instead of onnxruntime's MatMulNBits kernel),
onnxruntime-genai through
``og.Model`` with ``session_options.intra_op_num_threads`` set in a copy of its config. Each
repeat generates ``--new`` tokens greedily after a ``--prompt``-token prompt, the sides in
turn, each after a pause of :data:`PAUSE_S`. Prefill is the time to the first token (the
prompt's forward pass and the choice of its token); decode is the time per token after it
(one forward pass of one token with the cache, and the choice). Rows give ms (medians);
``tok/s`` columns give the prompt tokens per second of prefill and the tokens per second of
decode. ``--threads`` takes several counts (default: 1 and every available core).

The notes say how many greedy tokens equal onnxruntime-genai's. At accuracy level 4 each
product rounds its activations to int8, so a last-bit difference upstream (torch's norms and
attention against onnxruntime's) can move a code and, on a random model's near-tied logits,
the token; ``--accuracy-level 1`` keeps the products' activations in float32.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from common import Row, available_cores, emit, machine_facts

import sonnx
from sonnx.generation import load_decoder
from sonnx.generation.model_dir import decoder_file

REFERENCE = "onnxruntime-genai"


def build_models(root: Path, args: argparse.Namespace) -> dict[str, Path]:
    """The builder's fp32 and int4 directories of a random llama of the given shape."""
    import transformers
    from onnxruntime_genai.models.builder import create_model, parse_extra_options
    from tokenizers import Tokenizer, models, pre_tokenizers

    config = transformers.LlamaConfig(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        intermediate_size=args.intermediate,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        max_position_embeddings=2048,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config)
    params = sum(p.numel() for p in model.parameters())
    hf = root / "hf"
    model.save_pretrained(hf)
    words = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i for i in range(3, args.vocab)}}
    tokenizer = Tokenizer(models.WordLevel(words, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    ).save_pretrained(hf)
    built = {}
    logging.getLogger("onnxruntime.quantization").setLevel(logging.WARNING)
    for precision in args.precisions:
        out = root / precision
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            extra = []
            if precision == "int4" and args.accuracy_level is not None:
                extra.append(f"accuracy_level={args.accuracy_level}")
            options = parse_extra_options("", str(hf), str(out), precision, "cpu", str(root), extra)
            create_model("", str(hf), str(out), precision, "cpu", str(root), **options)
        built[precision] = out
    print(f"built a llama of {params / 1e6:.1f}M parameters: {', '.join(built)}")
    return built


def genai_copy(model_dir: Path, threads: int, root: Path) -> Path:
    """``model_dir`` with its config asking onnxruntime for ``threads`` intra-op threads (the
    other files linked)."""
    out = root / f"{model_dir.name}-t{threads}"
    if out.exists():
        return out
    out.mkdir()
    for f in model_dir.iterdir():
        if f.name != "genai_config.json":
            (out / f.name).symlink_to(f)
    config = json.loads((model_dir / "genai_config.json").read_text())
    session = config["model"]["decoder"].setdefault("session_options", {})
    session.update({"intra_op_num_threads": threads, "inter_op_num_threads": 1})
    (out / "genai_config.json").write_text(json.dumps(config))
    return out


class GenaiSide:
    def __init__(self, model_dir: Path) -> None:
        import onnxruntime_genai as og

        self.og = og
        self.model = og.Model(str(model_dir))

    def __call__(self, prompt: np.ndarray, new: int) -> tuple[float, float, list[int]]:
        params = self.og.GeneratorParams(self.model)
        length = len(prompt) + new
        params.set_search_options(max_length=length, min_length=length, do_sample=False)
        generator = self.og.Generator(self.model, params)
        start = time.perf_counter()
        generator.append_tokens(prompt)
        generator.generate_next_token()  # the prompt's logits were computed by append_tokens
        first = time.perf_counter()
        for _ in range(new - 1):
            generator.generate_next_token()
        end = time.perf_counter()
        tokens = list(generator.get_sequence(0)[len(prompt) :])
        return first - start, (end - first) / (new - 1), tokens


class SonnxSide:
    def __init__(
        self, model_dir: Path, use_graph: bool, kernels: str = "onnxruntime", verify: bool = True
    ) -> None:
        path = str(decoder_file(model_dir))
        # No compile budget: on two loaded cores the prompt's graph alone can take the default
        # 120 s, and the decode step would then run eagerly through graph mode's general path.
        budget = {"compile_budget": None} if use_graph else {}
        rep = sonnx.prepare(path, use_graph=use_graph, kernels=kernels, verify=verify, **budget)
        self.model = load_decoder(model_dir, rep=rep)

    def __call__(self, prompt: np.ndarray, new: int) -> tuple[float, float, list[int]]:
        stamps: list[float] = []
        start = time.perf_counter()
        out = self.model.generate(
            prompt,
            max_new_tokens=new,
            eos_token_id=None,
            streamer=lambda tokens: stamps.append(time.perf_counter()),
        )
        tokens = out[0, len(prompt) :].tolist()
        return stamps[0] - start, (stamps[-1] - stamps[0]) / (new - 1), tokens


def agreement(tokens: list[int], reference: list[int]) -> str:
    """How far the greedy tokens follow onnxruntime-genai's: all of them, or the leading run
    before the first difference (greedy decoding diverges for good after one)."""
    if tokens == reference:
        return f"greedy tokens the same as onnxruntime-genai's ({len(tokens)})"
    first = next(
        (i for i, (x, y) in enumerate(zip(tokens, reference, strict=False)) if x != y),
        min(len(tokens), len(reference)),
    )
    return f"greedy tokens: the first {first} of {len(reference)} as onnxruntime-genai's"


#: Seconds each side waits before its generation. onnxruntime-genai's worker threads go on
#: spinning after its last token (its sessions allow spinning, onnxruntime's default), and
#: torch's OpenMP workers after their last parallel region: without the pause, the side run
#: next paid for them (sonnx's two-thread int4 prefill took 104 ms right after genai's
#: generation and 57 ms alone, its process's CPU time twice its wall time).
PAUSE_S = 0.3


def measure(sides: dict, prompt: np.ndarray, new: int, repeats: int, warmup: int) -> dict:
    """Per side: median prefill seconds, median decode seconds per token, and the tokens.
    Each generation starts after :data:`PAUSE_S` of idle time."""
    names = list(sides)
    for _ in range(warmup):
        for name in names:
            sides[name](prompt, new)
    samples: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
    tokens = {}
    for i in range(repeats):
        for k in range(len(names)):
            name = names[(i + k) % len(names)]
            time.sleep(PAUSE_S)
            prefill, decode, tokens[name] = sides[name](prompt, new)
            samples[name].append((prefill, decode))
    return {
        n: (
            statistics.median(s[0] for s in samples[n]),
            statistics.median(s[1] for s in samples[n]),
            tokens[n],
        )
        for n in names
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, nargs="+", default=None)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--precisions", nargs="+", default=["fp32", "int4"])
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--kv-heads", type=int, default=4)
    parser.add_argument("--intermediate", type=int, default=2048)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--prompt", type=int, default=128, help="prompt tokens")
    parser.add_argument("--new", type=int, default=32, help="generated tokens")
    parser.add_argument("--graph", action="store_true", help="also time graph mode")
    parser.add_argument(
        "--accuracy-level",
        type=int,
        choices=[1, 2, 3, 4],
        default=None,
        help="the builder's MatMulNBits accuracy level for int4 (its CPU default: 4, the "
        "activations rounded to int8 in each product; 1 keeps them float32)",
    )
    parser.add_argument(
        "--no-verify",
        action="store_true",
        help="graph mode without its first-run check (an int4 model's int8 rounding of the "
        "activations can move the compiled logits past the check's bound; the greedy tokens "
        "are compared with onnxruntime-genai's either way)",
    )
    args = parser.parse_args()
    threads = args.threads or sorted({1, available_cores()})
    prompt = np.random.default_rng(0).integers(3, args.vocab, args.prompt).astype(np.int64)
    rows, notes = [], []
    with tempfile.TemporaryDirectory(prefix="sonnx-bench-generate-") as tmp:
        root = Path(tmp)
        built = build_models(root, args)
        for precision, model_dir in built.items():
            for n in threads:
                torch.set_num_threads(n)
                sides = {"genai": GenaiSide(genai_copy(model_dir, n, root))}
                sides["eager"] = SonnxSide(model_dir, use_graph=False)
                if precision == "int4":  # the products on torch's kernels instead
                    sides["eager kernels=torch"] = SonnxSide(model_dir, False, kernels="torch")
                if args.graph:
                    label = "graph, verify=False" if args.no_verify else "graph"
                    sides[label] = SonnxSide(model_dir, True, verify=not args.no_verify)
                found = measure(sides, prompt, args.new, args.repeats, args.warmup)
                g_prefill, g_decode, g_tokens = found.pop("genai")
                for mode, (prefill, decode, tokens) in found.items():
                    case = f"{precision} {n}t {mode}"
                    notes.append(f"{case}: {agreement(tokens, g_tokens)}")
                    speeds = {"sonnx tok/s": args.prompt / prefill}
                    speeds["genai tok/s"] = args.prompt / g_prefill
                    rows.append(Row(f"{case} prefill", prefill, g_prefill, REFERENCE, extra=speeds))
                    speeds = {"sonnx tok/s": 1 / decode, "genai tok/s": 1 / g_decode}
                    rows.append(Row(f"{case} decode", decode, g_decode, REFERENCE, extra=speeds))
    shape = f"hidden {args.hidden}, {args.layers} layers, {args.heads}/{args.kv_heads} heads"
    settings = {
        "prompt": args.prompt,
        "new": args.new,
        "repeats": args.repeats,
        "warmup": args.warmup,
        "shape": f"{shape}, MLP {args.intermediate}, vocab {args.vocab}",
        "int4 accuracy level": args.accuracy_level or "the builder's (4)",
    }
    emit(
        "generate: prefill and decode vs onnxruntime-genai",
        machine_facts(max(threads)),
        settings,
        rows,
        args.json,
        extra_columns=["sonnx tok/s", "genai tok/s"],
        notes=notes,
    )


if __name__ == "__main__":
    main()
