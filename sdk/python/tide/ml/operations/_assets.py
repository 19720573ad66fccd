"""ml_client.environments, ml_client.datastores and ml_client.data."""

from __future__ import annotations

import json
import os
from typing import Any, Iterator, Optional

from tide.ml._http import Transport
from tide.ml.operations._base import _Ops
from tide.ml.entities._assets import Data, Datastore, Environment
from tide.ml.exceptions import ValidationException


class EnvironmentOperations(_Ops):
    """Versioned environments (``ml_client.environments``)."""

    def __init__(self, transport: Transport, workspace: str) -> None:
        super().__init__(transport, workspace, "environments")

    def create_or_update(self, environment: Environment) -> Environment:
        """Registers a new version (no version: the next number). A
        conda_file that names a file is read, relative to the environment's
        YAML file when it was loaded from one."""
        body = environment._to_rest()
        conda = body.get("conda_file")
        if isinstance(conda, dict):
            body["conda_file"] = json.dumps(conda)
        elif isinstance(conda, str) and conda and "\n" not in conda:
            path = conda if os.path.isabs(conda) else os.path.join(getattr(environment, "_base_path", None) or os.getcwd(), conda)
            if not os.path.isfile(path):
                raise ValidationException("conda_file: %s not found" % path, status_code=400,
                                          problem={"code": "ValidationError", "field": "conda_file"})
            with open(path, encoding="utf-8") as f:
                body["conda_file"] = f.read()
        return Environment._from_rest(self._t.json("POST", self._path(), body=body))

    def get(self, name: str, version: Optional[str] = None, label: Optional[str] = None) -> Environment:
        """One version; label="latest" (or no version) is the newest."""
        if version and label:
            raise ValueError("get: pass version or label, not both")
        if label not in (None, "latest"):
            raise ValidationException("label %s: tide knows only the label latest" % label, status_code=400,
                                      problem={"code": "ValidationError", "field": "label"})
        return Environment._from_rest(self._t.json("GET", self._path(name, "versions", version or "latest")))

    def list(self, name: Optional[str] = None) -> Iterator[Environment]:
        """Every version of every environment, or of one name."""
        for d in self._t.json("GET", self._path(), query={"name": name})["value"]:
            yield Environment._from_rest(d)

    def delete(self, name: str, version: str) -> None:
        """Deletes one version; jobs that used it keep what they resolved."""
        self._t.json("DELETE", self._path(name, "versions", version))


class DatastoreOperations(_Ops):
    """Datastores (``ml_client.datastores``)."""

    def __init__(self, transport: Transport, workspace: str) -> None:
        super().__init__(transport, workspace, "datastores")

    def create_or_update(self, datastore: Datastore) -> Datastore:
        """Creates or replaces the datastore."""
        return Datastore._from_rest(self._t.json("PUT", self._path(datastore.name or ""), body=datastore._to_rest()))

    def get(self, name: str) -> Datastore:
        """Returns one datastore."""
        return Datastore._from_rest(self._t.json("GET", self._path(name)))

    def list(self) -> Iterator[Datastore]:
        """Lists the workspace's datastores."""
        for d in self._t.json("GET", self._path())["value"]:
            yield Datastore._from_rest(d)

    def delete(self, name: str) -> None:
        """Deletes a datastore."""
        self._t.json("DELETE", self._path(name))


class DataOperations(_Ops):
    """Data assets (``ml_client.data``), on servers that register them.

    A server without data-asset routes answers 404 for the route; the SDK
    then says data assets are not supported yet rather than "not found"."""

    def __init__(self, transport: Transport, workspace: str) -> None:
        super().__init__(transport, workspace, "data")

    def _call(self, method: str, path: str, **kw: Any) -> Any:
        from tide.core.exceptions import ResourceNotFoundError

        try:
            return self._t.json(method, path, **kw)
        except ResourceNotFoundError as e:
            if e.code in ("", "NotFound") and "route" in e.message.lower():
                raise ValidationException("data assets are not supported yet by this tide server; "
                                          "give jobs the path itself with Input(path=...)", status_code=404,
                                          problem=e.problem) from None
            raise

    def create_or_update(self, data: Data) -> Data:
        """Registers a new version of a data asset."""
        return Data._from_rest(self._call("POST", self._path(), body=data._to_rest()))

    def get(self, name: str, version: Optional[str] = None, label: Optional[str] = None) -> Data:
        """One version; label="latest" (or no version) is the newest."""
        return Data._from_rest(self._call("GET", self._path(name, "versions", version or label or "latest")))

    def list(self, name: Optional[str] = None) -> Iterator[Data]:
        """Data assets, every version, or of one name."""
        for d in self._call("GET", self._path(), query={"name": name})["value"]:
            yield Data._from_rest(d)
