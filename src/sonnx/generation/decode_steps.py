"""The decode steps after the prompt: a token per sequence in, the next logits out.

The decode loop (:mod:`sonnx.generation.search`) runs the prompt with
:meth:`Decoder.step <sonnx.generation.decoder.Decoder.step>`, then hands each step's chosen
tokens to one of these, chosen by :func:`decode_steps`:

- :class:`GrowingSteps`, for graphs that concatenate the past and the new rows (optimum's
  exports) or take a past that grows: the attention mask gains a column of 1s per step.
- :class:`StaticSteps`, for a shared buffer of ``max_length`` rows (onnxruntime-genai's
  ``past_present_share_buffer``, GroupQueryAttention: :func:`static_shapes`). The genai graph
  reads each sequence's length from the mask (``seqlens_k = ReduceSum(mask) - 1``) and
  ``total_sequence_length`` from its width, so each step feeds the mask at the buffer's full
  width, right-padded: 1s over a sequence's cache rows and its new token, 0s after, as
  onnxruntime-genai's CUDA-graph mode does. GroupQueryAttention writes the new row at the
  sequence's length and attends to the rows up to it only, and every step's inputs (tokens
  (batch, 1), mask (batch, max_length), positions (batch, 1), the cache buffers) have the same
  shapes. The lengths live on the device and count up there: no step reads anything back. This
  is how every such layout decodes (as fast as a growing mask on the CPU, faster with padding,
  which it never moves), and graph mode compiles its one shape once.
- :class:`CapturedSteps` (``generate(..., cuda_graph=True)``): the static step captured as a
  CUDA graph on its first call (:func:`~sonnx.runtime.cuda_graphs.capture_cuda_graph`) and
  replayed for every later token. The cache buffers are the graph's held inputs, so the step's
  in-place writes land in the cache; the tokens, mask and positions are copied into the
  graph's input buffers; the logits are the graph's output buffer, read (by the next token's
  choice) before the next replay overwrites it. Each call captures once: a warm-up run, a
  second copy of the compiled library with its weights, the capture, which a long generation
  pays back. :func:`check_cuda_graph` says why a call cannot capture.
"""

from __future__ import annotations

import torch

from sonnx.errors import BadInputError
from sonnx.generation.cache_layout import CacheLayout
from sonnx.generation.decoder import Cache, Decoder, last_logits
from sonnx.runtime.cuda_graphs import CapturedRun, capture_cuda_graph
from sonnx.tensor import Tensor

__all__ = [
    "CapturedSteps",
    "GrowingSteps",
    "StaticSteps",
    "check_cuda_graph",
    "decode_steps",
    "static_shapes",
]


def static_shapes(layout: CacheLayout) -> bool:
    """Whether ``layout``'s decode steps run at one shape: a shared buffer that the graph
    reads right-padded (GroupQueryAttention's)."""
    return layout.share_buffer and layout.right_padded


def check_cuda_graph(decoder: Decoder, num_beams: int) -> None:
    """Raise :class:`~sonnx.errors.BadInputError` where ``generate(..., cuda_graph=True)``
    cannot capture the decode step: beam search (it reorders the cache every step), a cache
    that is not a shared buffer, a graph not prepared in graph mode, or a device without CUDA.
    """
    rep, lay = decoder.rep, decoder.layout
    if num_beams > 1:
        raise BadInputError(
            f"generate: cuda_graph=True captures greedy or sampled decoding; num_beams="
            f"{num_beams} reorders the cache every step. Drop num_beams or cuda_graph"
        )
    if not static_shapes(lay):
        raise BadInputError(
            "generate: cuda_graph=True needs a KV cache in one shared buffer read right-padded "
            "(onnxruntime-genai's past_present_share_buffer with GroupQueryAttention), so that "
            f"every decode step has the same shapes; this layout has share_buffer="
            f"{lay.share_buffer}, right_padded={lay.right_padded}"
        )
    if rep.graph_runner is None:
        raise BadInputError(
            "generate: cuda_graph=True captures graph mode's compiled decode step; prepare the "
            "model with use_graph=True"
        )
    if rep.device.torch_device.type != "cuda":
        raise BadInputError(
            f"generate: cuda_graph=True needs a CUDA device; the model is prepared on {rep.device}"
        )


def decode_steps(
    decoder: Decoder,
    cache: Cache,
    mask: torch.Tensor,
    positions: torch.Tensor,
    left_padded: bool,
    cuda_graph: bool = False,
) -> GrowingSteps | StaticSteps:
    """The steps after a prompt run with ``mask`` and ``positions`` (batch, prompt length),
    left-padded where ``left_padded``, that left ``cache``: captured as a CUDA graph where
    ``cuda_graph`` (see :func:`check_cuda_graph`), at one shape for :func:`static_shapes`
    layouts, else with a mask that grows."""
    if cuda_graph:
        return CapturedSteps(decoder, cache, mask.sum(1))
    if static_shapes(decoder.layout):
        return StaticSteps(decoder, cache, mask.sum(1))
    return GrowingSteps(decoder, cache, mask, positions, left_padded)


class GrowingSteps:
    """Decode steps whose mask gains a column of 1s per step (see the module docstring)."""

    def __init__(
        self,
        decoder: Decoder,
        cache: Cache,
        mask: torch.Tensor,
        positions: torch.Tensor,
        left_padded: bool,
    ) -> None:
        self.decoder = decoder
        # The decode step's present is contiguous and is fed back as the next past. The prompt's
        # may not be: with a past of 0 rows inductor compiles Concat(past, new rows) into the
        # new rows' own layout (keys transposed from (batch, rows, heads, size)), and a past in
        # that layout would get a decode graph of its own (guards hold the past's strides).
        # One copy of the prompt's rows per call instead.
        self.cache = Cache(
            [k.contiguous() for k in cache.keys], [v.contiguous() for v in cache.values]
        )
        self._mask = mask
        self._positions = positions
        self._left_padded = left_padded

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        """The float32 logits (batch, vocab) after ``tokens`` (batch,)."""
        self._mask = torch.cat([self._mask, self._mask.new_ones(self._mask.shape[0], 1)], 1)
        self._positions = self._positions[:, -1:] + 1
        logits, self.cache = self.decoder.step(
            tokens[:, None], self._mask, self._positions, self.cache, left_padded=self._left_padded
        )
        return logits


class StaticSteps:
    """Decode steps of one shape over a shared buffer (see the module docstring).

    :param decoder: the decoder, of a :func:`static_shapes` layout.
    :param cache: the buffers of ``max_length`` rows that the prompt step wrote.
    :param lengths: each sequence's cache rows after the prompt, (batch,) on the device.
    """

    def __init__(self, decoder: Decoder, cache: Cache, lengths: torch.Tensor) -> None:
        self.decoder = decoder
        self.cache = cache
        self._lengths = lengths.reshape(-1, 1)
        self._columns = torch.arange(cache.keys[0].shape[2], device=decoder.device)

    def feed(self, tokens: torch.Tensor) -> dict[str, Tensor]:
        """The next step's inputs by name for ``tokens`` (batch,); each sequence's length
        counts one up. The cache's entries hold its buffers themselves."""
        self._lengths = self._lengths + 1
        mask = (self._columns < self._lengths).to(torch.int64)
        return self.decoder.feed(tokens[:, None], mask, self._lengths - 1, self.cache)

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        """The float32 logits (batch, vocab) after ``tokens`` (batch,)."""
        outputs = self.decoder.run(self.feed(tokens))
        # The present is the buffer fed, written in place; taken as the next past all the same,
        # as a graph that returned a new one would need.
        self.cache = self.decoder.present(outputs)
        return last_logits(outputs[self.decoder.layout.logits])


class CapturedSteps(StaticSteps):
    """:class:`StaticSteps` captured as a CUDA graph on the first call and replayed from then
    on (see the module docstring); :attr:`captured` is the capture, None before it."""

    def __init__(self, decoder: Decoder, cache: Cache, lengths: torch.Tensor) -> None:
        super().__init__(decoder, cache, lengths)
        self.captured: CapturedRun | None = None

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        """The float32 logits (batch, vocab) after ``tokens`` (batch,), from a replay."""
        feed = self.feed(tokens)
        lay = self.decoder.layout
        if self.captured is None:
            held = lay.past_keys + lay.past_values
            # The capture runs the step twice outside the graph: both write this step's rows
            # into the cache, the same ones the replay below writes again.
            with self.decoder.caches_in_place(), torch.no_grad():
                self.captured = capture_cuda_graph(self.decoder.rep, feed, held=held)
        run = self.captured
        out = run.run({n: t for n, t in feed.items() if n in run.inputs and n not in run.held})
        outputs = dict(zip(self.decoder.rep.outputs, out, strict=True))
        return last_logits(outputs[lay.logits].data)
