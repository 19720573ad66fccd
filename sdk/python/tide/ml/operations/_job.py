"""ml_client.jobs: submit, list, stream, cancel and download jobs."""

from __future__ import annotations

import os
import re
import sys
import time
import urllib.parse
from typing import IO, Any, Dict, Iterator, List, Optional

from tide.core.exceptions import AzureError, ServiceRequestError
from tide.ml import _snapshot
from tide.ml._http import Transport
from tide.ml._poller import LROPoller
from tide.ml.operations._base import _Ops
from tide.ml.entities._job import Job
from tide.ml.exceptions import JobException, ValidationException

TERMINAL = {"Completed", "Failed", "Canceled"}
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def is_local(path: str) -> bool:
    """A path with no scheme (azureml:, https://, blob:, ...) is a local file."""
    return not _SCHEME.match(path) or bool(re.match(r"^[A-Za-z]:[\\/]", path))


class JobOperations(_Ops):
    """Jobs of one workspace (``ml_client.jobs``)."""

    def __init__(self, transport: Transport, workspace: str) -> None:
        super().__init__(transport, workspace, "jobs")

    def create_or_update(self, job: Job, *, experiment_name: Optional[str] = None) -> Job:
        """Submits the job. Its code folder and local inputs (relative to the
        YAML file it was loaded from, else the current folder) are uploaded
        first, once per content."""
        if experiment_name:
            job.experiment_name = experiment_name
        body = job._to_rest()
        base = job._base_path or os.getcwd()
        # A sweep's code is its trial's.
        holder, field = body, "code"
        if body.get("type") == "sweep" and isinstance(body.get("trial"), dict):
            holder, field = body["trial"], "trial.code"
        code = holder.get("code")
        if isinstance(code, str) and code and is_local(code):
            holder["code"] = self._upload(base, field, code, folder=True)
        for name, inp in sorted((body.get("inputs") or {}).items()):
            if not isinstance(inp, dict) or inp.get("type", "uri_folder") not in ("uri_file", "uri_folder"):
                continue
            p = inp.get("path")
            if isinstance(p, str) and p and is_local(p):
                inp["path"] = self._upload(base, "inputs.%s.path" % name, p, folder=inp.get("type", "uri_folder") == "uri_folder")
        out = Job._from_rest(self._t.json("POST", self._path(), body=body))
        return out

    def _upload(self, base: str, field: str, path: str, folder: bool) -> str:
        src = path if os.path.isabs(path) else os.path.join(base, path)
        if not os.path.exists(src):
            raise ValidationException("%s: %s not found (paths are relative to the job file's folder, %s)" % (field, src, base),
                                      status_code=400, problem={"code": "ValidationError", "field": field})
        if folder and not os.path.isdir(src):
            raise ValidationException("%s: %s is a file; use type: uri_file, or name its folder" % (field, src),
                                      status_code=400, problem={"code": "ValidationError", "field": field})
        if not folder and os.path.isdir(src):
            raise ValidationException("%s: %s is a folder; use type: uri_folder" % (field, src),
                                      status_code=400, problem={"code": "ValidationError", "field": field})
        snap = _snapshot.pack(src)
        try:
            ref = "blob:" + snap.digest + ("" if os.path.isdir(src) else "/" + os.path.basename(src))
            if not self._has_blob(snap.digest):
                with open(snap.path, "rb") as f:
                    self._t.json("PUT", "/v1/blobs/" + snap.digest, data=f,  # type: ignore[arg-type]
                                 headers={"Content-Type": "application/gzip", "Content-Length": str(snap.size)},
                                 timeout=1800)
            return ref
        finally:
            snap.remove()

    def _has_blob(self, digest: str) -> bool:
        from tide.core.exceptions import ResourceNotFoundError

        try:
            self._t.json("HEAD", "/v1/blobs/" + digest)
            return True
        except ResourceNotFoundError:
            return False

    def get(self, name: str) -> Job:
        """Returns the job with its status, times, exit code, pending reason."""
        return Job._from_rest(self._t.json("GET", self._path(name)))

    def list(self, *, parent_job_name: Optional[str] = None, compute: Optional[str] = None,
             status: Optional[str] = None, max_results: Optional[int] = None) -> Iterator[Job]:
        """Lists the workspace's jobs (filters: compute, status; max_results), or
        the child jobs of a pipeline (its steps) or a sweep (its trials)."""
        q: Dict[str, Any] = {"compute": compute, "status": status, "limit": max_results, "parent": parent_job_name}
        for d in self._t.json("GET", self._path(), query=q)["value"]:
            yield Job._from_rest(d)

    def begin_cancel(self, name: str) -> LROPoller:
        """Cancels the job; the poller's result() is the job once it ended."""
        self._t.json("POST", self._path(name, suffix="/cancel"))

        def poll():
            j = self.get(name)
            st = getattr(j, "status", "") or ""
            return st in TERMINAL, st, j

        return LROPoller(poll)

    def stream(self, name: str, *, file: Optional[IO[str]] = None) -> Job:
        """Prints the job's log as it runs (lines of a multi-node job are
        prefixed [node-K]) and returns once the job ends. A failed job raises
        JobException with its error, as Azure ML's stream does."""
        out = file or sys.stdout
        last = ""
        job: Optional[Dict[str, Any]] = None
        multi = False
        tries = 0
        while True:
            try:
                for event, eid, data in self._t.events(self._path(name, suffix="/logs"), last_event_id=last):
                    tries = 0
                    if event == "log":
                        last = eid or last
                        text = data.get("text", "")
                        if multi:
                            text = "[node-%d] %s" % (data.get("node", 0), text)
                        out.write(text + "\n")
                        out.flush()
                    elif event in ("status", "end"):
                        job = data
                        multi = len(data.get("ranks") or []) > 1
                        if event == "end":
                            return self._ended(name, data)
            except (ServiceRequestError, ConnectionError, OSError):
                tries += 1
                if tries > 10:
                    raise
            if job is not None and job.get("status") in TERMINAL:
                return self._ended(name, job)
            time.sleep(min(0.2 * 2 ** tries, 5))

    def _ended(self, name: str, data: Dict[str, Any]) -> Job:
        job = Job._from_rest(data)
        if data.get("status") == "Failed":
            raise JobException("job %s failed: %s" % (name, data.get("error") or "exit code %s" % data.get("exit_code")),
                               job=job)
        return job

    def download(self, name: str, *, download_path: str = ".", output_name: Optional[str] = None,
                 all: bool = False) -> None:
        """Downloads what the job kept, laid out as az ml job download does:
        default artifacts under download_path/artifacts/, a named output X
        under download_path/named-outputs/X/ (all=True: both)."""
        if all and output_name:
            raise ValueError("download: pass all=True or output_name, not both")
        job = self._t.json("GET", self._path(name))
        named = sorted((job.get("outputs") or {}).keys())
        if output_name == "default" and "default" not in named:
            output_name = None
        if output_name and output_name not in named:
            raise ValidationException("output_name %s: not an output of job %s; its outputs are %s"
                                      % (output_name, name, ", ".join(named) or "none"),
                                      status_code=400, problem={"code": "ValidationError", "field": "output_name"})
        arts = self._t.json("GET", self._path(name, suffix="/artifacts"))["value"]
        for a in self._plan(arts, set(named), output_name, all):
            src, dest = a
            target = os.path.join(download_path, *dest.split("/"))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with self._t.open("GET", self._path(name, suffix="/artifacts/" + urllib.parse.quote(src)), timeout=1800) as resp, \
                    open(target + ".part", "wb") as f:
                for chunk in iter(lambda: resp.read(1 << 20), b""):
                    f.write(chunk)
            os.replace(target + ".part", target)

    @staticmethod
    def _plan(arts: List[Dict[str, Any]], named: set, output_name: Optional[str], all: bool) -> List[Any]:
        plan = []
        for a in arts:
            p = os.path.normpath(str(a["path"]).lstrip("/")).replace(os.sep, "/")
            if p in (".", "..") or p.startswith("../"):
                raise AzureError("artifact %r: unsafe path; refusing to write outside the download folder" % a["path"])
            out = ""
            if p.startswith("outputs/"):
                first = p[len("outputs/"):].split("/", 1)[0]
                if first in named:
                    out = first
            if out and (all or out == output_name):
                plan.append((a["path"], "named-outputs/%s/%s" % (out, p[len("outputs/" + out + "/"):])))
            elif not out and not output_name:
                plan.append((a["path"], "artifacts/" + p))
        return sorted(plan, key=lambda x: x[1])
