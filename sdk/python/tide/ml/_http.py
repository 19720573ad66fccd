"""HTTP to a tide server with the standard library only.

Idempotent calls (GET, HEAD, PUT, DELETE) are retried with exponential
back-off when the server cannot be reached or answers 429/502/503/504
(honouring Retry-After). POST is sent again only after a 429 Too Many
Requests (the server's admission limits refused it and stored nothing),
after the wait Retry-After asks for, with a warning on the "tide" logger;
any other failure of a POST is raised at once, since a resent submission
could run a job twice.
"""

from __future__ import annotations

import json
import logging
import random
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Dict, Iterator, Optional, Tuple

from tide.core.exceptions import HttpResponseError, ServiceRequestError, error_for

IDEMPOTENT = {"GET", "HEAD", "PUT", "DELETE"}
RETRY_STATUS = {429, 502, 503, 504}
# The longest Retry-After a throttled POST waits for; a 429 asking for more
# is raised.
MAX_THROTTLE_WAIT = 60.0

log = logging.getLogger("tide")


class Transport:
    """Sends requests to one server with one token."""

    def __init__(self, endpoint: str, token: str, *, retries: int = 5,
                 backoff: float = 0.2, timeout: float = 60.0,
                 ssl_context: Optional[ssl.SSLContext] = None) -> None:
        self.endpoint = endpoint.rstrip("/")
        self.token = token
        self.retries = retries
        self.backoff = backoff
        self.timeout = timeout
        self.ssl_context = ssl_context

    def url(self, path: str, query: Optional[Dict[str, Any]] = None) -> str:
        u = self.endpoint + path
        if query:
            q = {k: v for k, v in query.items() if v is not None and v != ""}
            if q:
                u += "?" + urllib.parse.urlencode(q, doseq=True)
        return u

    def open(self, method: str, path: str, *, query: Optional[Dict[str, Any]] = None,
             body: Any = None, data: Optional[bytes] = None,
             headers: Optional[Dict[str, str]] = None,
             timeout: Optional[float] = None):
        """Sends a request and returns the open response (status < 400), or
        raises the error azure.core would."""
        hdrs = {"Authorization": "Bearer " + self.token, "Accept": "application/json",
                "User-Agent": "tide-python-sdk"}
        if body is not None:
            data = json.dumps(body).encode()
            hdrs["Content-Type"] = "application/json"
        hdrs.update(headers or {})
        idempotent = method in IDEMPOTENT
        tries = self.retries
        delay = self.backoff
        for attempt in range(1, tries + 1):
            if hasattr(data, "seek"):
                data.seek(0)  # type: ignore[union-attr]  # a file body is resent whole
            req = urllib.request.Request(self.url(path, query), data=data, method=method, headers=hdrs)
            try:
                return urllib.request.urlopen(req, timeout=timeout or self.timeout, context=self.ssl_context)
            except urllib.error.HTTPError as e:
                if idempotent and e.code in RETRY_STATUS and attempt < tries:
                    wait = _retry_after(e.headers.get("Retry-After"), delay)
                    e.close()
                    time.sleep(wait)
                    delay *= 2
                    continue
                if not idempotent and e.code == 429 and attempt < tries:
                    wait = _retry_after(e.headers.get("Retry-After"), delay, MAX_THROTTLE_WAIT + 1)
                    err = _problem(e)
                    if wait > MAX_THROTTLE_WAIT:
                        raise err from None
                    log.warning("throttled by the tide server (%s): %s; sending again in %g s (attempt %d of %d)",
                                err.problem.get("limit", "429"), err, wait, attempt + 1, tries)
                    time.sleep(wait)
                    delay *= 2
                    continue
                raise _problem(e) from None
            except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
                if idempotent and attempt < tries:
                    time.sleep(delay * (1 + random.random() / 2))
                    delay *= 2
                    continue
                reason = getattr(e, "reason", e)
                raise ServiceRequestError("cannot reach the tide server at %s: %s" % (self.endpoint, reason)) from None
        raise ServiceRequestError("unreachable")  # the loop always returns or raises

    def json(self, method: str, path: str, **kw: Any) -> Any:
        """Sends a request and decodes its JSON answer (None when empty)."""
        with self.open(method, path, **kw) as resp:
            raw = resp.read()
        return json.loads(raw) if raw.strip() else None

    def status(self, method: str, path: str, **kw: Any) -> Tuple[int, Any]:
        """Like json, with the HTTP status."""
        with self.open(method, path, **kw) as resp:
            raw = resp.read()
            return resp.status, (json.loads(raw) if raw.strip() else None)

    def events(self, path: str, *, last_event_id: Optional[str] = None,
               query: Optional[Dict[str, Any]] = None) -> Iterator[Tuple[str, str, Any]]:
        """Reads server-sent events: yields (event, id, data) until the
        server closes the stream."""
        headers = {"Accept": "text/event-stream"}
        if last_event_id:
            headers["Last-Event-ID"] = last_event_id
        resp = self.open("GET", path, query=query, headers=headers, timeout=3600)
        with resp:
            event, eid, data = "message", "", []
            for raw in resp:
                line = raw.decode("utf-8", "replace").rstrip("\r\n")
                if line == "":
                    if data:
                        yield event, eid, json.loads("\n".join(data))
                    event, data = "message", []
                    continue
                if line.startswith(":"):
                    continue
                field, _, value = line.partition(":")
                value = value[1:] if value.startswith(" ") else value
                if field == "event":
                    event = value
                elif field == "data":
                    data.append(value)
                elif field == "id":
                    eid = value


def _retry_after(value: Optional[str], default: float, cap: float = 30.0) -> float:
    try:
        return max(0.0, min(float(value or ""), cap))
    except ValueError:
        return default


def _problem(e: urllib.error.HTTPError) -> HttpResponseError:
    try:
        raw = e.read()
    finally:
        e.close()
    try:
        problem = json.loads(raw) if raw else {}
    except ValueError:
        problem = {"detail": raw.decode("utf-8", "replace").strip()}
    if not isinstance(problem, dict):
        problem = {"detail": str(problem)}
    problem.setdefault("status", e.code)
    return error_for(e.code, problem)
