"""The service's 4xx answers: ``{"error": {"code", "message"}}``."""

from __future__ import annotations

from ..bundle.feedback import FeedbackFullError
from ..errors import (
    BundleError,
    FingerprintMismatchError,
    ManyheadsError,
    UnknownHeadError,
)

__all__ = ["HTTPError", "http_error"]


class HTTPError(Exception):
    """A 4xx answer: ``{"error": {"code", "message"}}``."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def http_error(exc: ManyheadsError) -> HTTPError:
    """The 4xx answer for a library error raised by a request's data."""
    message = str(exc.args[0]) if exc.args else str(exc)
    if isinstance(exc, FeedbackFullError):
        return HTTPError(413, "feedback_full", message)
    if isinstance(exc, UnknownHeadError):
        return HTTPError(404, "unknown_head", message)
    if isinstance(exc, FingerprintMismatchError):
        return HTTPError(409, "fingerprint_mismatch", message)
    if isinstance(exc, BundleError):
        return HTTPError(409, "bundle_state", message)
    return HTTPError(422, "bad_data", message)
