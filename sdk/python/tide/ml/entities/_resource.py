"""The base of every entity: the fields the user sets, sent to the server
under Azure ML's YAML names, and the status the server returns."""

from __future__ import annotations

from typing import Any, Dict, Optional


class Resource:
    """A named tide resource. Fields the server sets (``id``, ``etag``,
    ``provisioning_state``, ``status``, ...) are attributes after ``get`` or
    ``list`` return it; ``_rest`` keeps the server's whole object."""

    #: Fields sent to the server, in Azure ML's YAML names.
    _fields: tuple = ("name", "description", "tags")

    def __init__(self, *, name: Optional[str] = None, description: Optional[str] = None,
                 tags: Optional[Dict[str, str]] = None, **kwargs: Any) -> None:
        self.name = name
        self.description = description
        self.tags = dict(tags) if tags else None
        self._rest: Dict[str, Any] = {}
        # _source is the object as read from a YAML file (load_job,
        # load_compute): sent back whole, so fields this class does not
        # name still reach the server, which honours or refuses them.
        self._source: Dict[str, Any] = {}
        if kwargs:
            # Azure's classes take **kwargs; tide refuses what it would not
            # honour rather than dropping it silently.
            raise TypeError("%s: unexpected argument(s) %s" % (type(self).__name__, ", ".join(sorted(kwargs))))

    def _to_rest(self) -> Dict[str, Any]:
        out: Dict[str, Any] = dict(self._source)
        for f in self._fields:
            v = getattr(self, f, None)
            if v is None:
                continue
            out[f] = _rest_value(v)
        return out

    def _load_status(self, d: Dict[str, Any]) -> None:
        """Keeps the server's object and exposes its status fields."""
        self._rest = d
        for k, v in d.items():
            if k not in self._fields or getattr(self, k, None) is None:
                setattr(self, k, v)

    def _to_dict(self) -> Dict[str, Any]:
        """The server's object (after get/list) or what would be sent."""
        return dict(self._rest) if self._rest else self._to_rest()

    def __repr__(self) -> str:
        body = ", ".join("%s=%r" % (k, v) for k, v in self._to_rest().items())
        return "%s(%s)" % (type(self).__name__, body)


class _Settings:
    """A nested settings object (ssh_settings, network_settings, ...)."""

    _fields: tuple = ()

    def _to_rest(self) -> Dict[str, Any]:
        return {f: _rest_value(getattr(self, f)) for f in self._fields if getattr(self, f, None) is not None}

    def __repr__(self) -> str:
        return "%s(%s)" % (type(self).__name__, ", ".join("%s=%r" % kv for kv in self._to_rest().items()))


def _rest_value(v: Any) -> Any:
    if hasattr(v, "_to_rest"):
        return v._to_rest()
    if isinstance(v, dict):
        return {k: _rest_value(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_rest_value(x) for x in v]
    return v
