"""Environments, data assets and datastores."""

from __future__ import annotations

from typing import Any, Dict, Optional

from tide.ml.entities._resource import Resource


class Environment(Resource):
    """A versioned environment: a Docker image and/or a conda file, and
    tide's ``tide`` block saying how a host provides it (python, path,
    variables). ``conda_file`` is a path (read when sent) or the file's
    content as a dict or string."""

    _fields = Resource._fields + ("version", "image", "conda_file", "build", "tide")

    def __init__(self, *, name: Optional[str] = None, version: Optional[str] = None,
                 image: Optional[str] = None, conda_file: Any = None, build: Optional[Dict[str, Any]] = None,
                 tide: Optional[Dict[str, Any]] = None, **kwargs: Any) -> None:
        super().__init__(name=name, **kwargs)
        self.version = version
        self.image = image
        self.conda_file = conda_file
        self.build = build
        self.tide = tide

    @staticmethod
    def _from_rest(d: Dict[str, Any]) -> "Environment":
        obj = Environment(name=d.get("name"), version=d.get("version"))
        obj._load_status(d)
        return obj


class Data(Resource):
    """A versioned data asset (uri_file, uri_folder or mltable)."""

    _fields = Resource._fields + ("version", "type", "path")

    def __init__(self, *, name: Optional[str] = None, version: Optional[str] = None, type: str = "uri_folder",
                 path: Optional[str] = None, **kwargs: Any) -> None:
        super().__init__(name=name, **kwargs)
        self.version = version
        self.type = type
        self.path = path

    @staticmethod
    def _from_rest(d: Dict[str, Any]) -> "Data":
        obj = Data(name=d.get("name"), version=d.get("version"), type=d.get("type", "uri_folder"))
        obj._load_status(d)
        return obj


class Datastore(Resource):
    """A datastore jobs read with azureml://datastores/NAME/paths/P. tide's
    ``local`` type names a folder on the nodes (``path``)."""

    _fields = Resource._fields + ("type", "path")

    def __init__(self, *, name: Optional[str] = None, type: str = "local", path: Optional[str] = None,
                 **kwargs: Any) -> None:
        super().__init__(name=name, **kwargs)
        self.type = type
        self.path = path

    @staticmethod
    def _from_rest(d: Dict[str, Any]) -> "Datastore":
        obj = Datastore(name=d.get("name"), type=d.get("type", "local"))
        obj._load_status(d)
        return obj


class LocalDatastore(Datastore):
    """tide's datastore on the nodes' own disks."""

    def __init__(self, *, name: Optional[str] = None, path: Optional[str] = None, **kwargs: Any) -> None:
        super().__init__(name=name, type="local", path=path, **kwargs)
