"""The errors the server answers with, each carrying its HTTP status.

Every failure a request can cause is one of these (or a :class:`~sonnx.errors.SonnxError`,
answered as 400), so the app has one place that turns exceptions into responses and no
request can take the process down. Messages follow the house rule: name the input or model,
say what was expected, end in what was received.
"""

from __future__ import annotations

from sonnx.errors import SonnxError


class ServeError(SonnxError):
    """Base class: a request failed for a reason the client is told about."""

    status = 500
    headers: dict[str, str] = {}


class InvalidRequestError(ServeError, ValueError):
    """The request is malformed or does not match the model (names, datatypes, shapes)."""

    status = 400


class ModelRunError(InvalidRequestError):
    """The model raised on a request that passed validation, typically because of the values
    (a token id past the vocabulary, an index out of range)."""


class ModelLoadError(InvalidRequestError):
    """A load request failed (a bad ``config.json``, an unreadable model file); the text says
    why. Versions that already served before the request keep serving."""


class UnsupportedError(InvalidRequestError):
    """The request or model uses a feature sonnx serve does not implement (named in the text)."""


class ModelNotFoundError(ServeError, LookupError):
    """No model (or version) of that name is in the repository."""

    status = 404


class PayloadTooLargeError(ServeError):
    """The request body is larger than the server's limit."""

    status = 413
    # The rest of an oversized body is not read, so the connection cannot be reused.
    headers = {"Connection": "close"}


class ModelUnavailableError(ServeError):
    """The model exists but is loading, unloading or being replaced; try again shortly."""

    status = 503
    headers = {"Retry-After": "1"}


class QueueFullError(ServeError):
    """The model's request queue is full (``max_queue_size``); the client should back off."""

    status = 503
    headers = {"Retry-After": "1"}


class DeadlineExceededError(ServeError, TimeoutError):
    """The request did not finish within its deadline (model ``request_timeout_ms`` or the
    request's ``timeout`` parameter)."""

    status = 504


class ConfigError(SonnxError, ValueError):
    """A model's ``config.json`` or the repository layout is invalid (reported at load time)."""
