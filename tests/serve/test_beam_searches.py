"""Beam-search requests run in worker threads give ``rep.generate``'s tokens, and stop between
two decode steps when their client goes away or the searches are closed."""

from __future__ import annotations

import asyncio
import queue
import threading

import pytest

from sonnx.generation import load_decoder
from sonnx.generation.model_dir import DecoderModel
from sonnx.generation.sampling import Sampling
from sonnx.serve.beam_searches import BeamSearches
from sonnx.serve.decode_scheduler import Event, GenerationRequest
from sonnx.serve.errors import ModelUnavailableError
from tests.generation.optimum_models import export_optimum_style, tiny_llama

PROMPT = [1, 5, 9, 33, 7]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> DecoderModel:
    return load_decoder(export_optimum_style(tiny_llama(), tmp_path_factory.mktemp("llama")))


def request(events: list[Event], max_new_tokens: int) -> GenerationRequest:
    return GenerationRequest(PROMPT, max_new_tokens, Sampling(), None, frozenset(), events.append)


def held_at_step(searches: BeamSearches, held: int, asked: GenerationRequest) -> threading.Event:
    """Make the searches' ``held``-th decode step wait until ``asked`` is cancelled; the event
    returned is set once that step has been reached. Counts the decode steps run in
    ``searches.steps``."""
    reached, step = threading.Event(), searches.decoder.step
    searches.steps = 0

    def counted(ids, mask, positions, cache, **options):
        if mask.shape[1] > ids.shape[1]:  # a decode step (the prompt run has no past)
            searches.steps += 1
            if searches.steps == held:
                reached.set()
                assert asked.cancelled.wait(timeout=60)
        return step(ids, mask, positions, cache, **options)

    searches.decoder.step = counted
    return reached


def test_a_finished_search_emits_rep_generates_tokens_then_none(model: DecoderModel) -> None:
    events: queue.Queue[Event] = queue.Queue()
    asked = GenerationRequest(PROMPT, 10, Sampling(), None, frozenset(), events.put)

    async def main() -> list[Event]:
        searches = BeamSearches(model)
        searches.submit(asked, num_beams=3)
        got = [await asyncio.to_thread(events.get, timeout=60)]
        while got[-1] is not None:
            got.append(await asyncio.to_thread(events.get, timeout=60))
        await searches.close()  # the search has finished: nothing to stop
        return got

    got = asyncio.run(main())
    expected = model.generate(PROMPT, max_new_tokens=10, num_beams=3, eos_token_id=None)
    assert got == [*expected[0, len(PROMPT) :].tolist(), None] and events.empty()


def test_a_cancelled_request_stops_its_search_at_the_next_step(model: DecoderModel) -> None:
    """The client went away during the second decode step: no third one runs and nothing
    more is emitted."""
    events: list[Event] = []

    async def main() -> None:
        searches = BeamSearches(model)
        asked = request(events, 200)
        reached = held_at_step(searches, 2, asked)
        searches.submit(asked, num_beams=3)
        assert await asyncio.to_thread(reached.wait, 60)
        asked.cancelled.set()
        await searches.close()  # waits for the search's thread to end
        assert searches.steps == 2

    asyncio.run(main())
    assert events == []


def test_close_stops_a_running_search_with_a_503_and_refuses_new_ones(
    model: DecoderModel,
) -> None:
    events: list[Event] = []
    late: list[Event] = []

    async def main() -> None:
        searches = BeamSearches(model)
        asked = request(events, 200)
        reached = held_at_step(searches, 2, asked)
        searches.submit(asked, num_beams=3)
        assert await asyncio.to_thread(reached.wait, 60)
        await searches.close()  # cancels the request, which lets the held step go on
        assert searches.steps == 2
        searches.submit(request(late, 4), num_beams=2)

    asyncio.run(main())
    assert len(events) == 1 and isinstance(events[0], ModelUnavailableError)
    assert len(late) == 1 and isinstance(late[0], ModelUnavailableError)


def test_a_failing_search_emits_its_error(model: DecoderModel) -> None:
    events: list[Event] = []
    bad = GenerationRequest([10**6], 4, Sampling(), None, frozenset(), events.append)

    async def main() -> None:
        searches = BeamSearches(model)
        searches.submit(bad, num_beams=2)
        await searches.close()

    asyncio.run(main())
    assert len(events) == 1 and isinstance(events[0], Exception)
    assert not isinstance(events[0], ModelUnavailableError)
