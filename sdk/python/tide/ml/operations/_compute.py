"""ml_client.compute: create, update, list, delete, start and stop computes."""

from __future__ import annotations

import urllib.parse
from typing import Any, Dict, Iterator, List, Optional

from tide.core.exceptions import HttpResponseError, ResourceNotFoundError
from tide.ml._http import Transport
from tide.ml._poller import LROPoller
from tide.ml.operations._base import _Ops
from tide.ml.entities._compute import Compute

# Provisioning states that end an operation, as Azure's.
_FINAL = {"Succeeded", "Failed", "Canceled"}


class ComputeOperations(_Ops):
    """Computes of one workspace (``ml_client.compute``)."""

    def __init__(self, transport: Transport, workspace: str) -> None:
        super().__init__(transport, workspace, "computes")

    def get(self, name: str) -> Compute:
        """Returns the compute with its status (provisioning_state,
        current_node_count, node_state_counts, ...)."""
        return Compute._from_rest(self._t.json("GET", self._path(name)))

    def list(self, *, compute_type: Optional[str] = None) -> Iterator[Compute]:
        """Lists the workspace's computes, optionally of one type."""
        for d in self._t.json("GET", self._path())["value"]:
            if compute_type is None or str(d.get("type", "")).lower() == compute_type.lower():
                yield Compute._from_rest(d)

    def begin_create_or_update(self, compute: Compute) -> LROPoller:
        """Creates the compute, or updates it when one of that name exists.
        The poller's result() is the compute once provisioning ends; a
        compute whose provisioning failed raises with the server's errors."""
        self._t.json("PUT", self._path(compute.name), body=compute._to_rest())
        return LROPoller(lambda: self._provisioned(compute.name))

    def _provisioned(self, name: str):
        c = self.get(name)
        state = getattr(c, "provisioning_state", "") or ""
        if state == "Failed":
            errs = "; ".join(e.get("message", "") for e in getattr(c, "errors", None) or [])
            raise HttpResponseError("compute %s: provisioning failed: %s" % (name, errs or "no reason given"),
                                    status_code=200, problem={"code": "ProvisioningFailed", "detail": errs})
        return state in _FINAL, state, c

    def begin_delete(self, name: str) -> LROPoller:
        """Deletes the compute; the poller finishes once it is gone."""
        self._t.json("DELETE", self._path(name))

        def poll():
            try:
                c = self.get(name)
            except ResourceNotFoundError:
                return True, "Deleted", None
            return False, getattr(c, "provisioning_state", "Deleting"), None

        return LROPoller(poll)

    def list_nodes(self, name: str) -> List[Dict[str, Any]]:
        """The compute's nodes: id, state, job, address, connection string."""
        return list(self._t.json("GET", self._path(name, suffix="/nodes"))["value"])

    def _verb(self, name: str, verb: str, want: str) -> LROPoller:
        self._t.json("POST", self._path(name, suffix="/" + verb))

        def poll():
            c = self.get(name)
            state = getattr(c, "state", "") or ""
            if state.endswith("Failed") or state == "Unusable":
                raise HttpResponseError("compute %s: %s ended in state %s" % (name, verb, state), status_code=200,
                                        problem={"code": state})
            return state == want, state, c

        return LROPoller(poll)

    def begin_start(self, name: str) -> LROPoller:
        """Starts a stopped compute instance; result() once it is Running."""
        return self._verb(name, "start", "Running")

    def begin_stop(self, name: str) -> LROPoller:
        """Stops a compute instance, keeping its disk; result() once Stopped."""
        return self._verb(name, "stop", "Stopped")

    def begin_restart(self, name: str) -> LROPoller:
        """Restarts a compute instance; result() once it is Running again."""
        return self._verb(name, "restart", "Running")

    def list_sizes(self) -> List[Dict[str, Any]]:
        """VM sizes of tide's catalog: name, family, vcpus, memory_gb, gpus, prices."""
        return list(self._t.json("GET", "/v1/sizes")["value"])

    def list_usage(self, *, location: Optional[str] = None) -> List[Dict[str, Any]]:
        """Quota use per location, VM family and tier."""
        return list(self._t.json("GET", "/v1/usages", query={"location": location})["value"])
