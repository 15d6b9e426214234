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


def load_tokenizer(model_dir: str | Path) -> Any:
    """The ``tokenizers.Tokenizer`` of ``model_dir/tokenizer.json``.

    :param model_dir: the model directory.
    :returns: the tokenizer (``encode(text).ids``, ``decode(ids)``).
    :raises BadInputError: the directory has no ``tokenizer.json``.
    """
    path = Path(model_dir) / "tokenizer.json"
    if not path.is_file():
        raise BadInputError(
            f"generate: {model_dir} has no tokenizer.json; give token ids instead of text"
        )
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(path))


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
