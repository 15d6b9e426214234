"""The beam-search requests of the generate endpoints (``num_beams`` above 1).

:class:`BeamSearches` runs each such request on its own in a worker thread, beside the
:class:`~sonnx.serve.decode_scheduler.DecodeScheduler`'s decode batch and not in it, by
:func:`~sonnx.generation.beam_search.beam_search` (what :meth:`SingaRep.generate` runs, so the
tokens are the same). The request's tokens are known once the search has finished: they are
then emitted one by one, then ``None``.

A search stops between two decode steps once its request is cancelled (the routes set
``cancelled`` when the client goes away; nothing more is emitted then) or once the searches
are closed (the version is being unloaded or the server stops: the request gets a 503), so
neither waits for the rest of a long search.
"""

from __future__ import annotations

import asyncio

import torch

from sonnx.generation.beam_search import BeamSearchCancelledError, beam_search
from sonnx.generation.decoder import Decoder
from sonnx.generation.model_dir import DecoderModel
from sonnx.serve.decode_scheduler import GenerationRequest
from sonnx.serve.errors import ModelUnavailableError

_UNLOADING = "this model version is being unloaded"


class BeamSearches:
    """Runs ``model``'s beam-search requests, each in its own worker thread (see the module
    docstring)."""

    def __init__(self, model: DecoderModel) -> None:
        self.model = model
        self.decoder = Decoder(model.rep, model.layout)
        self._running: dict[asyncio.Task[bool], GenerationRequest] = {}
        self._closed = False

    def submit(self, request: GenerationRequest, num_beams: int) -> None:
        """Start ``request``'s search with ``num_beams`` beams (from the event loop); once
        closed the request gets a 503 error instead."""
        if self._closed:
            request.emit(ModelUnavailableError(_UNLOADING))
            return
        task = asyncio.create_task(asyncio.to_thread(self._search, request, num_beams))
        self._running[task] = request
        task.add_done_callback(self._running.pop)

    async def close(self) -> None:
        """Stop the running searches at their next step (each of their requests gets a 503,
        unless its client had gone already) and wait for their threads; new ones get a 503."""
        self._closed = True
        running = dict(self._running)
        stopping = {task for task, request in running.items() if not request.cancelled.is_set()}
        for request in running.values():
            request.cancelled.set()
        for task, stopped in zip(running, await asyncio.gather(*running), strict=True):
            if stopped and task in stopping:
                running[task].emit(ModelUnavailableError(_UNLOADING))

    def _search(self, request: GenerationRequest, num_beams: int) -> bool:
        """Run ``request``'s search in this (worker) thread, emitting its tokens or its error;
        whether it was stopped before its end."""
        ends = sorted(request.ends)
        pad = self.model.pad_token_id
        ids = torch.tensor([request.prompt], device=self.decoder.device)
        try:
            tokens = beam_search(
                self.decoder,
                ids,
                torch.ones_like(ids),
                num_beams,
                request.max_new_tokens,
                ends,
                pad if pad is not None else (ends[0] if ends else 0),
                left_padded=False,
                stop=request.cancelled.is_set,
            )
        except BeamSearchCancelledError:
            return True
        except Exception as e:  # reported to the request's client
            request.emit(e)
            return False
        for token in tokens[0].tolist():
            request.emit(token)
        request.emit(None)
        return False
