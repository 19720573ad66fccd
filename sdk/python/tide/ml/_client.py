"""MLClient: one tide server, one token, one workspace."""

from __future__ import annotations

import ssl
from typing import Optional

from tide.ml import _config
from tide.ml._http import Transport
from tide.ml.operations import (ComputeOperations, DataOperations, DatastoreOperations, EnvironmentOperations,
                                JobOperations)


class MLClient:
    """A client of one workspace of a tide server, shaped like azure.ai.ml's.

    ``MLClient(endpoint="http://127.0.0.1:7430", token="...", workspace_name="default")``,
    or ``MLClient.from_config()`` to use what the ``tide`` CLI uses.
    ``ca_file`` names the CA certificate of a server on TLS with its own CA.
    """

    def __init__(self, *, endpoint: str, token: str, workspace_name: str = "default",
                 ca_file: Optional[str] = None, retries: int = 5, timeout: float = 60.0) -> None:
        if not endpoint:
            raise ValueError("endpoint: required, e.g. http://127.0.0.1:7430")
        if not token:
            raise ValueError("token: required; 'tide token create' makes one")
        ctx = ssl.create_default_context(cafile=ca_file) if ca_file else None
        self._transport = Transport(endpoint, token, retries=retries, timeout=timeout, ssl_context=ctx)
        self.workspace_name = workspace_name
        self.compute = ComputeOperations(self._transport, workspace_name)
        self.jobs = JobOperations(self._transport, workspace_name)
        self.environments = EnvironmentOperations(self._transport, workspace_name)
        self.datastores = DatastoreOperations(self._transport, workspace_name)
        self.data = DataOperations(self._transport, workspace_name)

    @classmethod
    def from_config(cls, *, path: Optional[str] = None, context: Optional[str] = None,
                    workspace_name: Optional[str] = None) -> "MLClient":
        """A client for the server the tide CLI uses: its config file
        (``$XDG_CONFIG_HOME/tide/config.json``; the current context when it
        holds several), with TIDE_SERVER, TIDE_TOKEN and TIDE_WORKSPACE
        taking precedence."""
        c = _config.load(path, context)
        return cls(endpoint=c["server"], token=c["token"],
                   workspace_name=workspace_name or c.get("workspace") or "default",
                   ca_file=c.get("ca_file"))

    def __repr__(self) -> str:
        return "MLClient(endpoint=%r, workspace_name=%r)" % (self._transport.endpoint, self.workspace_name)
