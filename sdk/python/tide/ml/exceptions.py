"""Errors of tide.ml, as azure.ai.ml.exceptions names them."""

from __future__ import annotations

from tide.core.exceptions import HttpResponseError


class ValidationException(HttpResponseError):
    """A file or object the server refused: ``errors`` lists each field problem
    (field path, message, line), exactly as the CLI prints them."""


class JobException(Exception):
    """A job the SDK followed ended Failed; ``job`` is its final state."""

    def __init__(self, message: str, job: object = None) -> None:
        super().__init__(message)
        self.message = message
        self.job = job
