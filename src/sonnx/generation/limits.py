"""What a decoder takes: its context length and its vocabulary, checked before a run.

A decoder fails deep inside a run when it is asked for more positions than it has (a
GroupQueryAttention graph's rotary caches have one row per position: past them an
``IndexError``), and a token id out of the vocabulary either fails in the embedding's
``Gather`` or, negative, silently counts from the end of the vocabulary (ONNX's ``Gather``
takes ``-5`` as ``vocab - 5``). :func:`check_token_ids` and :func:`check_context` say so up
front, naming the limit.

The limits come from the graph itself where it fixes them: the rows of GroupQueryAttention's
``cos_cache`` (positions), the logits' declared last dim or the embedding's rows (vocabulary);
then from the directory's configuration (onnxruntime-genai's ``model.context_length`` and
``model.vocab_size``, transformers' ``max_position_embeddings``/``n_positions`` and
``vocab_size``). Where several say, the smallest holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from sonnx.errors import BadInputError

if TYPE_CHECKING:
    from sonnx.runtime.rep import SingaRep

#: transformers' config keys for the most positions a model was built for.
_HF_CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length")
#: GroupQueryAttention's input that holds one rotary row per position.
_GQA_COS_CACHE = 7


@dataclass(frozen=True)
class DecoderLimits:
    """The most positions (prompt and generated tokens together) and the vocabulary size of a
    decoder; None where neither the graph nor a configuration says.

    :param context_length: the most positions a sequence may take.
    :param vocab_size: the number of token ids (valid ids are 0 .. vocab_size - 1).
    """

    context_length: int | None = None
    vocab_size: int | None = None


def decoder_limits(
    rep: SingaRep,
    input_ids: str = "input_ids",
    logits: str = "logits",
    genai_config: Mapping[str, Any] | None = None,
    hf_config: Mapping[str, Any] | None = None,
) -> DecoderLimits:
    """The limits of the decoder graph ``rep`` (see the module docstring for the sources).

    :param rep: the prepared decoder graph.
    :param input_ids: the input that takes the token ids.
    :param logits: the output that gives the logits.
    :param genai_config: the parsed ``genai_config.json``, or None.
    :param hf_config: the parsed transformers ``config.json``, or None.
    :returns: the limits found.
    """
    graph = rep.model.graph
    dims = {t.name: list(t.dims) for t in graph.initializer}
    contexts, vocabs = [], []
    for node in graph.node:
        if node.op_type == "GroupQueryAttention" and len(node.input) > _GQA_COS_CACHE:
            rows = dims.get(node.input[_GQA_COS_CACHE])
            contexts += rows[:1] if rows else []
        if node.op_type == "Gather" and len(node.input) == 2 and node.input[1] == input_ids:
            table = dims.get(node.input[0])
            vocabs += table[:1] if table else []
    for output in (o for o in graph.output if o.name == logits):
        shape = output.type.tensor_type.shape.dim
        if shape and shape[-1].HasField("dim_value"):
            vocabs.append(shape[-1].dim_value)
    model = (genai_config or {}).get("model", {})
    contexts += [model["context_length"]] if "context_length" in model else []
    vocabs += [model["vocab_size"]] if "vocab_size" in model else []
    hf = hf_config or {}
    contexts += [hf[k] for k in _HF_CONTEXT_KEYS if isinstance(hf.get(k), int)][:1]
    vocabs += [hf["vocab_size"]] if isinstance(hf.get("vocab_size"), int) else []
    return DecoderLimits(
        min((int(c) for c in contexts if int(c) > 0), default=None),
        min((int(v) for v in vocabs if int(v) > 0), default=None),
    )


def check_token_ids(ids: np.ndarray, vocab_size: int | None, where: str = "generate") -> None:
    """Refuse token ids that are not integers in ``[0, vocab_size)``.

    :param ids: the token ids, on the host.
    :param vocab_size: the vocabulary size, or None to check only the type.
    :param where: the caller's name, for the message.
    :raises BadInputError: float ids, or an id below 0 or at or past ``vocab_size``.
    """
    ids = np.asarray(ids)
    if ids.size and not (np.issubdtype(ids.dtype, np.integer) or ids.dtype == np.bool_):
        raise BadInputError(
            f"{where}: token ids must be integers, received {ids.dtype} values such as "
            f"{ids.reshape(-1)[0]!r}"
        )
    if vocab_size is None or not ids.size:
        return
    bad = ids[(ids < 0) | (ids >= vocab_size)]
    if bad.size:
        raise BadInputError(
            f"{where}: token ids must be in [0, {vocab_size - 1}] (the model's vocabulary of "
            f"{vocab_size}), received {int(bad[0])}"
        )


def check_context(
    length: int, max_new_tokens: int, context_length: int | None, where: str = "generate"
) -> None:
    """Refuse a prompt of ``length`` positions that, with ``max_new_tokens`` more, would run
    past ``context_length``.

    :param length: the prompt's positions (a padded batch's width).
    :param max_new_tokens: the tokens to generate after it (0 for a training batch).
    :param context_length: the model's context length, or None for no check.
    :param where: the caller's name, for the message.
    :raises BadInputError: ``length + max_new_tokens`` is past ``context_length``.
    """
    if context_length is None or length + max_new_tokens <= context_length:
        return
    if max_new_tokens == 0:
        raise BadInputError(
            f"{where}: the sequences take at most the model's context length of "
            f"{context_length} positions, received {length}"
        )
    room = max(context_length - length, 0)
    raise BadInputError(
        f"{where}: the prompt's {length} tokens and max_new_tokens={max_new_tokens} make "
        f"{length + max_new_tokens} positions, past the model's context length of "
        f"{context_length}; ask for at most {room} new tokens"
    )
