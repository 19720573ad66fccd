"""Errors the SDK raises, named as azure.core.exceptions names them.

Every error from the server carries its problem+json body (RFC 9457):
``error.status_code``, ``error.code`` (tide's stable code, e.g.
``ValidationError``), ``error.message`` (the server's text, naming the field
and what to do) and ``error.problem`` (the whole body, with ``errors`` listing
each field problem and its line).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional


class AzureError(Exception):
    """Base of every error the SDK raises (azure.core's name)."""

    def __init__(self, message: str = "", *args: Any) -> None:
        super().__init__(message, *args)
        self.message = message

    def __str__(self) -> str:
        return self.message


class ServiceRequestError(AzureError):
    """The request could not be sent: the server is unreachable."""


class HttpResponseError(AzureError):
    """The server answered with an error status."""

    def __init__(self, message: str = "", status_code: Optional[int] = None,
                 problem: Optional[Dict[str, Any]] = None) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.problem: Dict[str, Any] = problem or {}
        self.code: str = str(self.problem.get("code", ""))
        self.reason = self.problem.get("title", "")

    @property
    def errors(self) -> List[Dict[str, Any]]:
        """Field problems of a validation error: field, message, line."""
        return list(self.problem.get("errors") or [])


class ClientAuthenticationError(HttpResponseError):
    """401 or 403: the token is missing, wrong, expired, or lacks the role."""


class ResourceNotFoundError(HttpResponseError):
    """404: no such compute, job, environment, ..."""


class ResourceExistsError(HttpResponseError):
    """409: the resource exists or conflicts (quota, immutable field, etag)."""


class ResourceModifiedError(HttpResponseError):
    """412: the resource changed since it was read (If-Match)."""


def error_for(status: int, problem: Dict[str, Any]) -> HttpResponseError:
    """Returns the exception class azure.core would use for an HTTP status."""
    detail = problem.get("detail") or problem.get("title") or "HTTP %d" % status
    message = "(%s) %s" % (problem.get("code") or status, detail)
    for fp in problem.get("errors") or []:
        line = fp.get("line")
        where = fp.get("field") or ""
        if line:
            where = "line %s: %s" % (line, where)
        message += "\n  %s: %s" % (where, fp.get("message", ""))
    if status == 400 and problem.get("code") == "ValidationError":
        from tide.ml.exceptions import ValidationException

        return ValidationException(message, status_code=status, problem=problem)
    cls = {401: ClientAuthenticationError, 403: ClientAuthenticationError,
           404: ResourceNotFoundError, 409: ResourceExistsError,
           412: ResourceModifiedError}.get(status, HttpResponseError)
    return cls(message, status_code=status, problem=problem)
