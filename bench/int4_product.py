"""One 4-bit weight product, as an LLM's decode step runs it: sonnx against onnxruntime and torch.

    python bench/int4_product.py                       # M=1, K=N=2048, block 32, one thread
    python bench/int4_product.py --rows 1 8 --size 4096

A ``MatMulNBits`` node (4 bits, blocks of ``--block`` along K, accuracy level 4: onnxruntime
rounds the activations to int8 and runs its int8 x int4 kernel) is run by onnxruntime and by
sonnx (eagerly and in graph mode), with its default kernels (onnxruntime's own MatMulNBits
kernel called on torch's memory: :mod:`sonnx.operators.quantize.ort_kernels`) and with
``kernels="torch"`` (float32 activations rounded to int8 steps, times the weight dequantized to
float32 once). Beside them, three forms torch itself offers, timed on the same
weights, to show where torch's kernels stand: the float32 GEMV on the dequantized weight,
inductor's best single kernel (``torch.compile``) with the dequantization fused into the
reduction over a weight kept as int8 codes (a byte per weight), and torch's own 4-bit CPU
kernel, ``_weight_int4pack_mm_for_cpu`` (float32 activations times packed 4-bit codes; its
vectorised path needs AVX-512, and elsewhere it runs a scalar loop). Every side's result is checked
against onnxruntime's. The ratios are each side's time / onnxruntime's.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import numpy as np
import torch
from common import (
    add_common_args,
    checked_rows,
    emit,
    machine_facts,
    ort_session,
    pin_threads,
)
from onnx import TensorProto, helper, numpy_helper

import sonnx
from sonnx import autograd
from sonnx.operators.quantize.contrib_nbits import int8_blocks


def nbits_model(k: int, n: int, block: int, seed: int = 0) -> tuple[bytes, np.ndarray, np.ndarray]:
    """A one-node MatMulNBits model of random 4-bit codes and scales; also the codes (N, K)
    and the scales (N, K / block)."""
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, 16, (n, k), dtype=np.uint8)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).reshape(n, k // block, block // 2)
    scales = (rng.random((n, k // block)) * 0.02).astype(np.float32)
    node = helper.make_node(
        "MatMulNBits", ["a", "b", "scales"], ["y"], domain="com.microsoft",
        K=k, N=n, bits=4, block_size=block, accuracy_level=4,
    )  # fmt: skip
    graph = helper.make_graph(
        [node],
        "int4_product",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["m", k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["m", n])],
        [
            numpy_helper.from_array(packed, "b"),
            numpy_helper.from_array(scales.reshape(-1), "scales"),
        ],
    )
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    return model.SerializeToString(), codes, scales


def torch_forms(
    codes: np.ndarray, scales: np.ndarray, block: int
) -> tuple[Callable[[torch.Tensor], torch.Tensor], ...]:
    """torch's float32 GEMV on the dequantized weight, inductor's fused kernel over int8
    codes, and torch's 4-bit kernel over packed codes; each takes activations already rounded
    to int8 steps."""
    n, k = codes.shape
    centred = torch.from_numpy(codes.astype(np.int8) - 8)
    s = torch.from_numpy(scales)
    dense = (centred.float().reshape(n, -1, block) * s[..., None]).reshape(n, k)

    def gemv(a: torch.Tensor) -> torch.Tensor:
        return a @ dense.t()

    def fused(a: torch.Tensor) -> torch.Tensor:
        blocks = a.reshape(a.shape[0], 1, -1, block) * centred.reshape(n, -1, block).float()
        return (blocks.sum(-1) * s).sum(-1)

    # w = (code - 8) * scale + zero, with the scales and (zero) offsets as (K / block, N, 2).
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(
        torch.from_numpy(codes.astype(np.int32)), 1
    )
    scales_and_zeros = torch.stack([s.t(), torch.zeros_like(s.t())], -1).contiguous()

    def int4pack(a: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten._weight_int4pack_mm_for_cpu(a, packed, block, scales_and_zeros)

    return gemv, torch.compile(fused, dynamic=False), int4pack


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=2048, help="K = N")
    parser.add_argument("--block", type=int, default=32)
    parser.add_argument("--rows", type=int, nargs="+", default=[1], help="M: tokens per call")
    add_common_args(parser, repeats=201, warmup=20)
    args = parser.parse_args()
    threads = pin_threads(args.threads)
    autograd.training = False
    data, codes, scales = nbits_model(args.size, args.size, args.block)
    session = ort_session(data, threads)
    eager, graph = sonnx.prepare(data), sonnx.prepare(data, use_graph=True)
    torch_eager = sonnx.prepare(data, kernels="torch")
    torch_graph = sonnx.prepare(data, use_graph=True, kernels="torch")
    gemv, fused, int4pack = torch_forms(codes, scales, args.block)
    rows, notes = [], []
    for m in args.rows:
        a = np.random.default_rng(m).standard_normal((m, args.size)).astype(np.float32)
        rounded = int8_blocks(torch.from_numpy(a), args.block)
        sides = {
            "onnxruntime": lambda a=a: session.run(None, {"a": a})[0],
            "sonnx eager": lambda a=a: eager.run([a])[0].numpy(),
            "sonnx graph": lambda a=a: graph.run([a])[0].numpy(),
            "sonnx eager, kernels=torch": lambda a=a: torch_eager.run([a])[0].numpy(),
            "sonnx graph, kernels=torch": lambda a=a: torch_graph.run([a])[0].numpy(),
            "torch GEMV (dequantized)": lambda r=rounded: gemv(r).numpy(),
            "inductor fused (int8 codes)": lambda r=rounded: fused(r).numpy(),
            "torch int4pack kernel": lambda r=rounded: int4pack(r).numpy(),
        }
        found = checked_rows(sides, f"{{side}}, M={m}", args.repeats, args.warmup)
        rows += found[0]
        notes += found[1]
    settings = {"size": args.size, "block": args.block, "rows": args.rows, "repeats": args.repeats}
    facts = machine_facts(threads)
    emit("4-bit product (MatMulNBits)", facts, settings, rows, args.json, (), notes)


if __name__ == "__main__":
    main()
