"""TextStreamer: text pieces as tokens come, holding back a character split across tokens."""

from __future__ import annotations

import numpy as np
import pytest

from sonnx.errors import BadInputError
from sonnx.generation.text import TextStreamer, load_tokenizer
from tests.genai_builds import build


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(build("llama", "fp32"))


def stream(tokenizer, ids: list[int]) -> tuple[list[str], TextStreamer]:
    pieces: list[str] = []
    streamer = TextStreamer(tokenizer, pieces.append)
    for token in ids:
        streamer(np.array([token]))
    return pieces, streamer


def test_pieces_join_to_the_decoded_text(tokenizer) -> None:
    ids = tokenizer.encode("the quick brown fox")
    pieces, _ = stream(tokenizer, ids)
    assert len(pieces) == len(ids) and "".join(pieces) == "the quick brown fox"


def test_a_character_split_across_tokens_waits_for_its_second_half(tokenizer) -> None:
    ids = tokenizer.encode("a é")  # é is two bytes, each its own byte-level token
    assert tokenizer.decode(ids[:-1]).endswith("\ufffd")
    pieces, _ = stream(tokenizer, ids)
    assert "\ufffd" not in "".join(pieces) and "".join(pieces) == "a é"
    held, streamer = stream(tokenizer, ids[:-1])
    assert "".join(held) == "a "
    streamer.finish()  # a sequence that ended inside the character shows what it has
    assert "".join(held) == "a \ufffd"


def test_a_directory_without_a_tokenizer_is_refused(tmp_path) -> None:
    with pytest.raises(BadInputError, match=r"no tokenizer\.json"):
        load_tokenizer(tmp_path)


def test_encode_gives_a_list_of_ids_as_hugging_face_does(tokenizer) -> None:
    ids = tokenizer.encode("the quick brown fox")
    assert isinstance(ids, list) and all(isinstance(i, int) for i in ids)
    assert ids == tokenizer.backend.encode("the quick brown fox").ids
    assert tokenizer.decode(np.array(ids)) == "the quick brown fox"
    assert tokenizer.vocab_size == tokenizer.backend.get_vocab_size(with_added_tokens=True)
    with pytest.raises(BadInputError, match="expected a str, received list"):
        tokenizer.encode(["the"])
