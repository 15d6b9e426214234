"""The decode loop: prompts in, generated token ids out, one step per new token.

:func:`generate_tokens` is what :meth:`SingaRep.generate` and :func:`sonnx.generate` call. A
batch of prompts of different lengths is left-padded: the attention mask is 0 on the padding
and each row's positions count its real tokens only (``cumsum(mask) - 1``, as transformers
does), so a padded row generates what it would alone. Sequences that reach an end token are
filled with ``pad_token_id`` from then on; the loop stops when every sequence has ended or
``max_new_tokens`` were generated.

Host reads (on a GPU each waits for the device): the KV cache stays in the
:class:`~sonnx.generation.decoder.Cache`, and whether the mask pads is known on the host from
how the prompts were padded. A step's chosen tokens are read back once, and only when the host
needs them: for the streamer and for the end-token test, which decides whether the loop goes
on. With neither, no step reads anything and the host queues steps ahead of the device. Beyond
that a call reads a mask handed in on the device (once), the prompt run's value checks (a bad
token id in the prompt is reported at once), the decode steps' value checks once after the
loop (their tokens are the model's own choices), and the result: at most ``new tokens + 4``
reads in all.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import torch

from sonnx.engine.tracing import deferred_checks
from sonnx.errors import BadInputError
from sonnx.generation.beam_search import beam_search, beam_search_conflict
from sonnx.generation.cache_layout import CacheLayout, detect_layout, read_genai_config
from sonnx.generation.decode_steps import check_cuda_graph, decode_steps
from sonnx.generation.decoder import Decoder
from sonnx.generation.limits import check_context, check_token_ids
from sonnx.generation.sampling import Sampling

if TYPE_CHECKING:
    from sonnx.runtime.rep import SingaRep

#: Called once per step with the new token of every sequence, a (batch,) int64 array.
Streamer = Callable[[np.ndarray], None]


def generate_tokens(
    rep: SingaRep,
    input_ids: Any,
    max_new_tokens: int = 32,
    do_sample: bool = False,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    num_beams: int = 1,
    eos_token_id: int | Sequence[int] | None = None,
    attention_mask: Any = None,
    streamer: Streamer | None = None,
    seed: int | None = None,
    pad_token_id: int | None = None,
    layout: CacheLayout | None = None,
    cuda_graph: bool = False,
) -> np.ndarray:
    """The prompts followed by their generated tokens, (batch, prompt length + new), int64.

    ``input_ids`` is one prompt (a list of ints or a 1-D array), a (batch, length) array with
    ``attention_mask`` marking left padding, or a list of prompts of any lengths (left-padded
    here). ``eos_token_id`` (one id or several) ends a sequence; ``pad_token_id`` (default: the
    first end id, else 0) fills ended sequences and padding. ``seed`` makes sampling
    reproducible. ``num_beams > 1`` is beam search (no sampling, no streamer).

    Decode steps over onnxruntime-genai's shared buffer run at one shape (the attention mask
    at the buffer's full width: see :mod:`~sonnx.generation.decode_steps`); ``cuda_graph=True``
    captures that step as a CUDA graph once per call and replays it for every further token,
    for a model prepared in graph mode on a CUDA device.

    :param rep: the prepared decoder graph.
    :param input_ids: the prompt or prompts, as above.
    :param max_new_tokens: the most tokens generated per sequence (>= 1).
    :param do_sample: True samples (see :class:`Sampling`), False is greedy.
    :param temperature: the sampling temperature (> 0).
    :param top_k: sample among the ``top_k`` most likely tokens (0: all).
    :param top_p: sample among the most likely tokens holding ``top_p`` of the probability.
    :param num_beams: the beams of beam search; 1 for greedy or sampled decoding.
    :param eos_token_id: the id or ids that end a sequence; None for none.
    :param attention_mask: the (batch, length) mask of a padded ``input_ids`` array (0 on the
        left padding), or None.
    :param streamer: called after each step with the (batch,) new tokens (see
        :class:`TextStreamer`), or None.
    :param seed: a seed for reproducible sampling, or None.
    :param pad_token_id: the id that fills ended sequences and padding.
    :param layout: the graph's cache layout; None detects it from the ``genai_config.json``
        beside the file ``rep`` was prepared from, else from optimum's names.
    :param cuda_graph: capture the decode step as a CUDA graph and replay it.
    :returns: the (batch, prompt length + new) int64 token ids.
    :raises BadInputError: ``max_new_tokens`` is not a positive int, a sampling setting is out of
        range, beam search is asked to sample or stream, ``input_ids`` or ``attention_mask``
        has the wrong type or shape (or right padding), a token id is outside the model's
        vocabulary, the prompt and ``max_new_tokens`` run past the model's context length
        (see :mod:`~sonnx.generation.limits`), or ``cuda_graph`` is asked where it cannot
        hold (beam search, no shared buffer, not graph mode, not CUDA).
    :raises BadModelError: ``layout`` is None and the graph does not follow optimum's names.
    """
    if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise BadInputError(
            f"generate: max_new_tokens must be an int >= 1, received {max_new_tokens!r}"
        )
    sampling = Sampling(do_sample, temperature, top_k, top_p)
    ends = _end_ids(eos_token_id)
    pad = pad_token_id if pad_token_id is not None else (ends[0] if ends else 0)
    decoder = Decoder(rep, layout or detect_layout(rep, _config_beside(rep)))
    if cuda_graph:
        check_cuda_graph(decoder, num_beams)
    limits = decoder.layout.limits
    prompts = prompt_batch(input_ids, attention_mask, pad, decoder.device, limits.vocab_size)
    check_context(prompts.ids.shape[1], max_new_tokens, limits.context_length)
    if num_beams > 1:
        conflict = beam_search_conflict(num_beams, do_sample, streamer is not None)
        if conflict is not None:
            raise BadInputError(conflict)
        ids, mask, padded = prompts
        tokens = beam_search(decoder, ids, mask, num_beams, max_new_tokens, ends, pad, padded)
    else:
        tokens = _decode(
            decoder, prompts, sampling, max_new_tokens, ends, pad, streamer, seed, cuda_graph
        )
    return torch.cat([prompts.ids, tokens], 1).cpu().numpy()


def _config_beside(rep: SingaRep) -> dict[str, Any] | None:
    """The ``genai_config.json`` in the directory of the ``.onnx`` file ``rep`` was prepared
    from (onnxruntime-genai's directory), or None."""
    origin = getattr(rep, "origin", None)
    return read_genai_config(Path(origin).parent) if origin else None


def _decode(
    decoder: Decoder,
    prompts: PromptBatch,
    sampling: Sampling,
    max_new_tokens: int,
    ends: list[int],
    pad: int,
    streamer: Streamer | None,
    seed: int | None,
    cuda_graph: bool,
) -> torch.Tensor:
    """Greedy or sampled tokens, (batch, new)."""
    device = decoder.device
    generator = None
    if sampling.do_sample and seed is not None:
        generator = torch.Generator(device=device).manual_seed(seed)
    end_ids = torch.tensor(ends, device=device)
    mask, padded = prompts.mask, prompts.left_padded
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    batch = prompts.ids.shape[0]
    cache = decoder.empty_cache(batch, prompts.ids.shape[1] + max_new_tokens)
    logits, cache = decoder.step(prompts.ids, mask, positions, cache, left_padded=padded)
    next_logits = decode_steps(decoder, cache, mask, positions, padded, cuda_graph)
    ended = torch.zeros(batch, dtype=torch.bool, device=device)
    ended_here = np.zeros(batch, dtype=bool)  # the same, known on the host
    watched = streamer is not None or bool(ends)
    chosen: list[torch.Tensor] = []
    # The decode steps' value checks are read once, after the loop (see the module docstring).
    with deferred_checks():
        for i in range(max_new_tokens):
            token = sampling.next_tokens(logits, generator)
            if ends:
                token = torch.where(ended, pad, token)
                ended |= torch.isin(token, end_ids)
            chosen.append(token)
            if watched:
                # The step's one read, inherent: the host streams the tokens and sees from
                # them whether every sequence has ended.
                host = token.cpu().numpy()
                if streamer is not None:
                    streamer(host)
                ended_here |= np.isin(host, ends)
            if i == max_new_tokens - 1 or (ends and ended_here.all()):
                break
            logits = next_logits(token)
    return torch.stack(chosen, 1)


class PromptBatch(NamedTuple):
    """The prompts of a call as the decode loop takes them."""

    #: (batch, length) int64 token ids on the decoder's device, left-padded.
    ids: torch.Tensor
    #: Their (batch, length) int64 attention mask on the device, 0 on the padding.
    mask: torch.Tensor
    #: Whether any row is padded, known on the host (never read back from the device).
    left_padded: bool


def prompt_batch(
    input_ids: Any,
    attention_mask: Any,
    pad: int,
    device: torch.device,
    vocab_size: int | None = None,
) -> PromptBatch:
    """``input_ids`` and its attention mask as (batch, length) int64 tensors on ``device``,
    prompts of different lengths left-padded with ``pad``, and whether any row is padded.
    The tokens (those the mask marks) are checked against ``vocab_size`` on the host: ids
    handed in on a device are read back with the mask, in one read."""
    if isinstance(input_ids, (list, tuple)) and input_ids and not np.isscalar(input_ids[0]):
        rows = [np.asarray(r).reshape(-1) for r in input_ids]
        for row in rows:
            check_token_ids(row, vocab_size)
        rows = [r.astype(np.int64) for r in rows]
        if attention_mask is None and len({len(r) for r in rows}) > 1:
            width = max(len(r) for r in rows)
            ids = np.full((len(rows), width), pad, dtype=np.int64)
            mask = np.zeros((len(rows), width), dtype=np.int64)
            for b, r in enumerate(rows):
                ids[b, width - len(r) :] = r
                mask[b, width - len(r) :] = 1
            on_device = torch.from_numpy(ids).to(device), torch.from_numpy(mask).to(device)
            return PromptBatch(*on_device, left_padded=True)
        input_ids = np.stack(rows)
    given_on_device = torch.is_tensor(input_ids)
    ids = torch.as_tensor(input_ids if given_on_device else np.asarray(input_ids))
    if ids.dim() == 1:
        ids = ids[None]
    if ids.dim() != 2 or ids.shape[1] == 0 or ids.dtype.is_floating_point:
        raise BadInputError(
            f"generate: input_ids must be integer token ids, one prompt or (batch, length), "
            f"received {ids.dtype} with shape {tuple(ids.shape)}"
        )
    if not given_on_device:
        host_ids = ids.numpy()
    ids = ids.to(device=device, dtype=torch.int64)
    if attention_mask is None:
        if given_on_device:
            host_ids = ids.cpu().numpy()
        check_token_ids(host_ids, vocab_size)
        return PromptBatch(ids, torch.ones_like(ids), left_padded=False)
    mask = torch.as_tensor(
        np.asarray(attention_mask) if not torch.is_tensor(attention_mask) else attention_mask
    )
    if mask.dim() == 1:
        mask = mask[None]
    if mask.shape != ids.shape:
        raise BadInputError(
            f"generate: attention_mask must have input_ids' shape {tuple(ids.shape)}, "
            f"received {tuple(mask.shape)}"
        )
    # The mask's padding (and ids handed in on a device) are checked and noted on the host:
    # one read if they were handed in on a device, none from then on.
    if given_on_device:
        host_ids, here = torch.stack([ids, mask.to(ids.device, torch.int64)]).cpu().numpy()
    else:
        here = mask.cpu().numpy()
    mask = mask.to(device=device, dtype=torch.int64)
    if (here[:, -1] == 0).any():
        raise BadInputError(
            "generate: pad prompts on the left (attention_mask 0 before the tokens); a row's "
            "last position is padding"
        )
    check_token_ids(host_ids[here != 0], vocab_size)
    padded = bool((here == 0).any())
    return PromptBatch(ids, mask, left_padded=padded)


def _end_ids(eos_token_id: int | Sequence[int] | None) -> list[int]:
    if eos_token_id is None:
        return []
    if isinstance(eos_token_id, (int, np.integer)):
        return [int(eos_token_id)]
    return [int(e) for e in eos_token_id]
