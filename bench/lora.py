"""One LoRA training step of sonnx on an onnxruntime-genai build against PEFT on the
transformers original, side by side.

    python bench/lora.py                    # hidden 256, 4 layers, batch 4 x 128 tokens
    python bench/lora.py --threads 1 --json

A llama config (``--hidden``, ``--layers``; 8 query heads over 4 KV heads, MLP 2.75x hidden)
gets random weights and is written twice: as a transformers directory, and by
onnxruntime-genai's model builder (fp32 and int4, CPU). The reference is PEFT's LoRA (rank 8,
alpha 16, on q/k/v/o and the MLP projections) on the transformers model with ``torch.optim.Adam``;
sonnx loads the very same adapter (``sonnx.lora.load``: the builder fuses q/k/v, so sonnx's q/k/v
adapter is one of rank 24 holding PEFT's three) into ``sonnx.lora.CausalLM`` and trains with
``opt.Adam``. A step is forward, next-token cross-entropy (labels = the inputs), backward and
the Adam update. Before timing, both sides' first losses are compared.

Rows: ``lora-fp32`` (the float build), and ``qlora-int4`` (the 4-bit build, MatMulNBits
dequantized in the forward) against the same float PEFT step: PEFT's QLoRA needs bitsandbytes
on a GPU, so the int4 row shows what a 4-bit base costs sonnx on the CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from common import add_common_args, emit, machine_facts, pin_threads, row_from, time_pair

import sonnx.lora as lora
from sonnx import opt
from sonnx.tensor import to_numpy

LR = 1e-3
RANK, ALPHA = 8, 16
MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
VOCAB = 512


def write_models(root: Path, hidden: int, layers: int) -> tuple[Path, dict[str, Path]]:
    """The transformers directory and the builder's fp32 and int4 directories."""
    import transformers
    from onnxruntime_genai.models.builder import create_model, parse_extra_options
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = {f"w{i}": i for i in range(VOCAB)}
    tokenizer = Tokenizer(models.WordLevel(words, unk_token="w0"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    config = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=hidden,
        intermediate_size=hidden * 11 // 4,
        num_hidden_layers=layers,
        num_attention_heads=8,
        num_key_value_heads=4,
        max_position_embeddings=512,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    hf = root / "hf"
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(hf)
    transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token="w0", bos_token="w1", eos_token="w2"
    ).save_pretrained(hf)
    builds = {}
    for precision in ("fp32", "int4"):
        out = root / precision
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            options = parse_extra_options("", str(hf), str(out), precision, "cpu", str(root), [])
            create_model("", str(hf), str(out), precision, "cpu", str(root), **options)
        builds[precision] = out
    return hf, builds


def peft_side(hf: Path, adapter_dir: Path, ids: torch.Tensor) -> Callable[[], float]:
    """PEFT's step (returning its loss); saves the (random) starting adapter first."""
    import peft
    import transformers

    base = transformers.AutoModelForCausalLM.from_pretrained(hf)
    config = peft.LoraConfig(
        r=RANK, lora_alpha=ALPHA, target_modules=MODULES, init_lora_weights=False
    )
    model = peft.get_peft_model(base, config)
    model.save_pretrained(adapter_dir)
    model.train()
    adam = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=LR)

    def step() -> float:
        adam.zero_grad(set_to_none=True)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        adam.step()
        return float(loss)

    return step


def sonnx_side(build: Path, adapter_dir: Path, ids: np.ndarray) -> Callable[[], float]:
    """sonnx's step (returning its loss) from the adapter PEFT saved."""
    model = lora.CausalLM(build)
    lora.load(model.rep, adapter_dir)
    model.set_optimizer(opt.Adam(lr=LR))
    model.train()

    def step() -> float:
        return float(to_numpy(model.train_one_batch(ids, ids)[1]))

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=128)
    add_common_args(parser, repeats=9, warmup=2)
    args = parser.parse_args()
    threads = pin_threads(args.threads)
    rng = np.random.default_rng(0)
    ids = rng.integers(3, VOCAB, (args.batch, args.seq)).astype(np.int64)
    rows, notes = [], []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        hf, builds = write_models(root, args.hidden, args.layers)
        reference = peft_side(hf, root / "adapter", torch.from_numpy(ids))
        # Both sides' first steps start from the same adapter: their losses must agree.
        reference_first = reference()
        for case, precision in (("lora-fp32", "fp32"), ("qlora-int4", "int4")):
            ours = sonnx_side(builds[precision], root / "adapter", ids)
            notes.append(
                f"{case}: first-step losses sonnx {ours():.5f}, PEFT {reference_first:.5f}"
            )
            timings = time_pair(ours, reference, args.repeats, args.warmup)
            rows.append(row_from(case, "PEFT fp32 + Adam", timings))
    settings = {
        "hidden": args.hidden,
        "layers": args.layers,
        "batch": args.batch,
        "seq": args.seq,
        "rank": RANK,
        "repeats": args.repeats,
        "warmup": args.warmup,
    }
    emit("LoRA training step", machine_facts(threads), settings, rows, args.json, notes=notes)


if __name__ == "__main__":
    main()
