"""Text in, text out: a model directory's ``tokenizer.json`` through the ``tokenizers`` library.

:class:`TextStreamer` turns the tokens of one sequence, as they come, into text pieces: it
decodes everything generated so far and hands on what was added, holding a piece back while
it ends in an incomplete character (a byte-level token that is half of a UTF-8 sequence
decodes to U+FFFD until its other half arrives). :meth:`TextStreamer.finish` writes what is
held back at the end, when no other half is coming.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from sonnx.errors import BadInputError


class Tokenizer:
    """A model directory's tokenizer with Hugging Face's calls: :meth:`encode` gives a list of
    token ids, :meth:`decode` takes one back to text. ``backend`` is the underlying
    ``tokenizers.Tokenizer`` (whose own ``encode`` gives an ``Encoding``: offsets, tokens).

    :param backend: the ``tokenizers.Tokenizer`` to wrap.
    """

    def __init__(self, backend: Any) -> None:
        self.backend = backend

    @property
    def vocab_size(self) -> int:
        """The number of ids, added tokens included."""
        return int(self.backend.get_vocab_size(with_added_tokens=True))

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """The token ids of ``text``.

        :param text: the text to tokenize.
        :param add_special_tokens: add the tokenizer's special tokens (a start token).
        :returns: the ids.
        :raises BadInputError: ``text`` is not a string.
        """
        if not isinstance(text, str):
            raise BadInputError(f"Tokenizer.encode: expected a str, received {type(text).__name__}")
        return list(self.backend.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, ids: Any, skip_special_tokens: bool = False) -> str:
        """The text of token ``ids``.

        :param ids: the ids (a list, or a 1-D array).
        :param skip_special_tokens: leave special tokens (end, padding) out of the text.
        :returns: the text.
        """
        ids = [int(i) for i in np.asarray(ids).reshape(-1)]
        return str(self.backend.decode(ids, skip_special_tokens=skip_special_tokens))


def load_tokenizer(model_dir: str | Path) -> Tokenizer:
    """The :class:`Tokenizer` of ``model_dir/tokenizer.json``.

    :param model_dir: the model directory.
    :returns: the tokenizer (``encode(text)`` gives a list of ids, ``decode(ids)`` text).
    :raises BadInputError: the directory has no ``tokenizer.json``.
    """
    path = Path(model_dir) / "tokenizer.json"
    if not path.is_file():
        raise BadInputError(
            f"generate: {model_dir} has no tokenizer.json; give token ids instead of text"
        )
    from tokenizers import Tokenizer as Backend

    return Tokenizer(Backend.from_file(str(path)))


class TextStreamer:
    """A generation streamer for a batch of one that calls ``write`` with each new text piece.

    Pass it as ``streamer=`` and call :meth:`finish` when generation returns.

    :param tokenizer: the tokenizer that decodes the tokens (see :func:`load_tokenizer`).
    :param write: called with each new piece of text (``print``, ``list.append``, ...).
    """

    def __init__(self, tokenizer: Any, write: Callable[[str], None]) -> None:
        self.tokenizer = tokenizer
        self.write = write
        self.tokens: list[int] = []
        self.shown = ""

    def __call__(self, tokens: np.ndarray) -> None:
        self.tokens.append(int(tokens.reshape(-1)[0]))
        self._show(held_back=True)

    def finish(self) -> None:
        """Write the text held back (a sequence may end inside a character)."""
        self._show(held_back=False)

    def _show(self, held_back: bool) -> None:
        text = self.tokenizer.decode(self.tokens, skip_special_tokens=True)
        if held_back and text.endswith("\ufffd"):
            return
        # A tokenizer that rewrote earlier text (rare) has its new text shown whole.
        piece = text[len(self.shown) :] if text.startswith(self.shown) else text
        self.shown = text
        if piece:
            self.write(piece)
