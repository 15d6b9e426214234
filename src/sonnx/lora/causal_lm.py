"""``CausalLM``: an imported decoder-only LLM as a SONNXModel that trains on next-token loss.

The model is fed as onnxruntime-genai and optimum export it: ``input_ids``, an
``attention_mask``, ``position_ids`` where the graph has them, and empty past key/value caches
(length 0), so one run is a whole-sequence prefill whose logits train.

Padded batches: sequences of different lengths are padded on the left (or the right) with an
attention mask that is 0 on the padding. Positions count each sequence's own tokens
(``cumsum(mask) - 1``), and the loss skips every label that is padding or whose previous
position is, so each sequence's tokens give the logits and the loss terms they give alone.
GroupQueryAttention graphs read a sequence's length from its mask and keep its rows from the
first on, so they take padding on the right: there each row is rotated to put its tokens first
before the run, and the logits are rotated back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from sonnx.autograd import gather, reshape, softmax_cross_entropy_loss, transpose
from sonnx.autograd import slice as slice_axes
from sonnx.device import Device
from sonnx.errors import BadInputError
from sonnx.generation.cache_layout import read_genai_config
from sonnx.generation.decoder import tokens_first
from sonnx.generation.limits import check_context, check_token_ids, decoder_limits
from sonnx.generation.model_dir import generate as generate_in_dir
from sonnx.sonnx_model import SONNXModel, apply_update
from sonnx.tensor import Tensor, to_numpy

#: Label value that adds nothing to the loss (as in transformers).
IGNORE_INDEX = -100
_PAST_PREFIXES = ("past_key_values", "past.")


def _model_file(model_dir: Path) -> tuple[Path, int | None]:
    """The decoder file and head size the directory's genai_config.json names."""
    config = read_genai_config(model_dir)
    if config is None:
        raise BadInputError(f"CausalLM: directory {model_dir} has no genai_config.json")
    decoder = config["model"]["decoder"]
    return model_dir / decoder["filename"], decoder.get("head_size")


class CausalLM(SONNXModel):
    """A decoder-only LLM (an onnxruntime-genai model directory, or an ONNX file and its head
    size) whose ``train_one_batch(input_ids, labels)`` minimises next-token cross-entropy.

    ``labels`` line up with ``input_ids`` (position t's logits predict labels[t + 1]); label
    :data:`IGNORE_INDEX` marks tokens that add nothing to the loss (prompts). A batch of
    different lengths is padded (on the left or the right) with an ``attention_mask`` 0 on the
    padding; each sequence then trains as it would alone (see the module docstring).

    :param model: an onnxruntime-genai model directory, or an ONNX decoder file.
    :param head_size: the attention head size, for caches whose head size the graph leaves
        free (None: from the directory's ``genai_config.json``).
    :param device: where the weights live (None: the default device).
    :raises BadInputError: a directory without ``genai_config.json``.
    :raises BadModelError: the model file is not valid ONNX.
    :raises UnsupportedOperatorError: the model uses operators sonnx has no converter for.
    """

    def __init__(
        self, model: str | Path, head_size: int | None = None, device: Device | None = None
    ) -> None:
        path = Path(model)
        config = None
        if path.is_dir():
            config = read_genai_config(path)
            path, configured = _model_file(path)
            head_size = head_size or configured
        super().__init__(str(path), device=device)
        self.head_size = head_size
        #: The context length and vocabulary that :meth:`feeds` checks ids against.
        self.limits = decoder_limits(self.rep, genai_config=config)
        #: GroupQueryAttention takes padding on the right (see the module docstring).
        nodes = self.rep.model.graph.node
        self.right_padded = any(n.op_type == "GroupQueryAttention" for n in nodes)

    def feeds(self, input_ids: Any, attention_mask: Any = None) -> dict[str, Any]:
        """The graph's inputs for a prefill of ``input_ids`` (B, S) with empty caches.

        :param input_ids: the token ids (B, S), an array, list or Tensor.
        :param attention_mask: 1 for a real token, 0 for padding (None: all ones).
        :returns: the value of every graph input by name (position ids from the mask).
        :raises BadInputError: float ids or ids outside the vocabulary, sequences longer than
            the model's context length, a graph input that is none of these or a cache, a
            cache that is not 4-D, or a free head size without ``head_size``.
        """
        ids = to_numpy(input_ids) if isinstance(input_ids, Tensor) else np.asarray(input_ids)
        check_token_ids(ids, self.limits.vocab_size, "CausalLM")
        check_context(ids.shape[-1], 0, self.limits.context_length, "CausalLM")
        batch = ids.shape[0]
        mask = _padding_mask(ids, attention_mask)
        feeds: dict[str, Any] = {}
        for spec in self.rep.input_specs:
            if spec.name == "input_ids":
                feeds[spec.name] = ids.astype(np.int64)
            elif spec.name == "attention_mask":
                feeds[spec.name] = mask.astype(spec.plain_array_dtype or np.int64)
            elif spec.name == "position_ids":
                feeds[spec.name] = np.clip(np.cumsum(mask, axis=1) - 1, 0, None).astype(np.int64)
            elif spec.name.startswith(_PAST_PREFIXES):
                feeds[spec.name] = self._empty_cache(spec, batch)
            else:
                raise BadInputError(
                    f"CausalLM: the graph input {spec.name!r} is none of input_ids, "
                    "attention_mask, position_ids or a past key/value cache"
                )
        return feeds

    def _empty_cache(self, spec: Any, batch: int) -> np.ndarray:
        dims = list(spec.shape or ())
        if len(dims) != 4:
            raise BadInputError(
                f"CausalLM: cache input {spec.name!r} must be 4-D (batch, heads, past length, "
                f"head size), received {spec.describe()}"
            )
        size = dims[3]
        if not isinstance(size, int):
            if self.head_size is None:
                raise BadInputError(
                    f"CausalLM: cache input {spec.name!r} has a free head size ({size!r}); "
                    "pass head_size= or a model directory with genai_config.json"
                )
            size = self.head_size
        heads = dims[1] if isinstance(dims[1], int) else 1
        return np.zeros((batch, heads, 0, size), spec.plain_array_dtype or np.float32)

    def forward(self, input_ids: Any, attention_mask: Any = None) -> Tensor:  # type: ignore[override]
        """The logits (B, S, vocabulary) of a prefill of ``input_ids``.

        :param input_ids: the token ids (B, S).
        :param attention_mask: 1 for a real token, 0 for padding on the left or the right
            (None: all ones).
        :returns: the logits, lined up with ``input_ids``.
        :raises BadInputError: as :meth:`feeds` raises it.
        """
        ids = to_numpy(input_ids) if isinstance(input_ids, Tensor) else np.asarray(input_ids)
        mask = _padding_mask(ids, attention_mask)
        # host: the order indexes the NumPy feeds (each row's tokens first)
        order = tokens_first(torch.from_numpy(mask)).numpy()
        if not self.right_padded or (order == np.arange(ids.shape[1])).all():
            return self.rep.run(self.feeds(ids, mask))[0]
        rows = np.arange(ids.shape[0])[:, None]
        logits = self.rep.run(self.feeds(ids[rows, order], mask[rows, order]))[0]
        batch, length, vocab = logits.shape
        # Position t of row b went to order's inverse at t: gather it back (autograd sees it).
        back = np.argsort(order, axis=1) + rows * length
        flat = reshape(logits, [batch * length, vocab])
        return reshape(gather(flat, 0, back.reshape(-1).tolist()), [batch, length, vocab])

    def train_one_batch(  # type: ignore[override]
        self,
        x: Any,
        y: Any,
        dist_option: str = "fp32",
        spars: float | None = None,
        *,
        attention_mask: Any = None,
    ) -> tuple[Tensor, Tensor]:
        """Forward ``x`` (input ids), next-token loss against ``y`` (labels), optimizer step.

        :param x: the token ids (B, S).
        :param y: the labels (B, S), lined up with ``x``; :data:`IGNORE_INDEX` skips a token.
        :param dist_option: as in :meth:`SONNXModel.train_one_batch`.
        :param spars: as in :meth:`SONNXModel.train_one_batch`.
        :param attention_mask: 1 for a real token, 0 for padding on the left or the right
            (None: all ones); labels on padding, and the first label after it, are skipped.
        :returns: the logits and the loss.
        :raises BadInputError: no optimizer was set, labels of another shape than ``x``, a
            mask that is not padding around each row's tokens, or a bad ``dist_option``.
        """
        if self.optimizer is None:
            raise BadInputError(
                "CausalLM.train_one_batch: no optimizer; call model.set_optimizer(...) first"
            )
        logits = self.forward(x, attention_mask)
        loss = next_token_loss(logits, y, attention_mask)
        apply_update(self.optimizer, loss, dist_option, spars)
        return logits, loss

    def generate(self, prompt: Any, **options: Any) -> Any:
        """Generate from the model as it is now, its adapters included: the prepared graph
        is used as it is (no ``load_decoder(model_dir, rep=model.rep)``), with the end
        tokens, cache layout and tokenizer of the directory it was loaded from.

        :param prompt: a text or a list of texts (encoded with the directory's
            ``tokenizer.json``), or token ids, as :func:`sonnx.generate` takes them.
        :param options: :func:`sonnx.generate`'s options (``max_new_tokens``,
            ``do_sample``, ``num_beams``, ``streamer``, ...).
        :returns: the new text (a list for a list of texts), or for token ids the prompt
            followed by its continuation.
        :raises BadInputError: as :func:`sonnx.generate` raises it (a directory that holds no
            ``genai_config.json`` or optimum files, text without ``tokenizer.json``).
        """
        return generate_in_dir(Path(self.rep.origin).parent, prompt, rep=self.rep, **options)


def next_token_loss(logits: Tensor, labels: Any, attention_mask: Any = None) -> Tensor:
    """Mean cross-entropy of ``logits[:, t]`` against ``labels[:, t + 1]``, skipping
    :data:`IGNORE_INDEX` labels and, with an ``attention_mask``, every label where the mask
    is 0 at ``t`` or ``t + 1`` (padding, and a sequence's first token after left padding)."""
    y = to_numpy(labels) if isinstance(labels, Tensor) else np.asarray(labels)
    if y.shape != logits.shape[:2]:
        raise BadInputError(
            f"next_token_loss: labels must have the input ids' shape {logits.shape[:2]}, "
            f"received {y.shape}"
        )
    if attention_mask is not None:
        mask = _padding_mask(y, attention_mask)
        y = np.where((mask[:, 1:] == 0) | (mask[:, :-1] == 0), IGNORE_INDEX, y[:, 1:])
        y = np.concatenate([np.full_like(y[:, :1], IGNORE_INDEX), y], axis=1)
    scores = transpose(slice_axes(logits, [0], [logits.shape[1] - 1], [1]), [0, 2, 1])
    targets = Tensor(data=np.ascontiguousarray(y[:, 1:]).astype(np.int64), requires_grad=False)
    return softmax_cross_entropy_loss(scores, targets, ignore_index=IGNORE_INDEX)


def _padding_mask(ids: np.ndarray, attention_mask: Any) -> np.ndarray:
    """``attention_mask`` as int64 (all ones where None), checked: ``ids``' shape, and each
    row's ones contiguous (padding before or after its tokens, never inside)."""
    if attention_mask is None:
        return np.ones(ids.shape, np.int64)
    mask = to_numpy(attention_mask) if isinstance(attention_mask, Tensor) else attention_mask
    mask = np.asarray(mask).astype(np.int64)
    if mask.shape != ids.shape:
        raise BadInputError(
            f"CausalLM: attention_mask must have the input ids' shape {ids.shape}, "
            f"received {mask.shape}"
        )
    ones = mask.sum(1)
    first, last = mask.argmax(1), mask.shape[1] - 1 - mask[:, ::-1].argmax(1)
    bad = (ones == 0) | (last - first + 1 != ones) | ~np.isin(mask, (0, 1)).all(1)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise BadInputError(
            "CausalLM: attention_mask must be 1 on each row's tokens and 0 on padding before "
            f"or after them, received row {row}: {mask[row].tolist()}"
        )
    return mask
