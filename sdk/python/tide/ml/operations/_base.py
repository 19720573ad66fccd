"""What every operations group shares: the transport and its workspace's paths."""

from __future__ import annotations

import urllib.parse

from tide.ml._http import Transport


class _Ops:
    def __init__(self, transport: Transport, workspace: str, kind: str) -> None:
        self._t = transport
        self._ws = workspace
        self._kind = kind

    def _path(self, *parts: str, suffix: str = "") -> str:
        """/v1/workspaces/WS/KIND[/part...][suffix], each part escaped."""
        p = "/v1/workspaces/%s/%s" % (urllib.parse.quote(self._ws, safe=""), self._kind)
        for part in parts:
            if part:
                p += "/" + urllib.parse.quote(part, safe="")
        return p + suffix
