"""command(), load_job() and the other load_* functions."""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Union

from tide.ml._http import Transport
from tide.ml.entities._assets import Datastore, Environment
from tide.ml.entities._compute import Compute
from tide.ml.entities._job import CommandJob, Input, Job, JobResourceConfiguration, Output


def command(*, command: str, code: Optional[str] = None, environment: Union[str, Environment, None] = None,
            inputs: Optional[Dict[str, Any]] = None, outputs: Optional[Dict[str, Output]] = None,
            compute: Optional[str] = None, name: Optional[str] = None, display_name: Optional[str] = None,
            description: Optional[str] = None, tags: Optional[Dict[str, str]] = None,
            experiment_name: Optional[str] = None, environment_variables: Optional[Dict[str, str]] = None,
            distribution: Any = None, instance_count: Optional[int] = None, instance_type: Optional[str] = None,
            shm_size: Optional[str] = None, timeout: Optional[int] = None, job_tier: Optional[str] = None,
            identity: Optional[Dict[str, Any]] = None) -> CommandJob:
    """Builds a command job as azure.ai.ml.command does. ``inputs`` holds
    Input objects or literal values (numbers, strings, booleans)."""
    resources = None
    if instance_count is not None or instance_type is not None or shm_size is not None:
        resources = JobResourceConfiguration(instance_count=instance_count, instance_type=instance_type,
                                             shm_size=shm_size)
    return CommandJob(command=command, code=code, environment=environment, inputs=inputs, outputs=outputs,
                      compute=compute, name=name, display_name=display_name, description=description, tags=tags,
                      experiment_name=experiment_name, environment_variables=environment_variables,
                      distribution=distribution, resources=resources,
                      limits={"timeout": timeout} if timeout is not None else None,
                      queue_settings={"job_tier": job_tier} if job_tier is not None else None,
                      identity=identity)


def _parse(kind: str, source: str, params_override: Optional[List[Dict[str, Any]]],
           transport: Optional[Transport]) -> Dict[str, Any]:
    """Reads a YAML file through the server's parser, so it is read exactly
    as the CLI reads it (same defaults, same file:line:field errors),
    with no YAML library needed here."""
    if transport is None:
        from tide.ml._client import MLClient

        transport = MLClient.from_config()._transport
    with open(source, "rb") as f:
        data = f.read()
    sets = []
    for override in params_override or []:
        for k, v in override.items():
            if isinstance(v, bool):
                v = "true" if v else "false"
            sets.append("%s=%s" % (k, v))
    return transport.json("POST", "/v1/parse/" + kind, data=data,
                          query={"file": os.path.basename(source), "set": sets},
                          headers={"Content-Type": "application/yaml"})


def _load(kind: str, from_rest: Any, source: str, params_override: Optional[List[Dict[str, Any]]],
          client: Any) -> Any:
    d = _parse(kind, source, params_override, getattr(client, "_transport", None))
    obj = from_rest(d)
    obj._source = d
    return obj


def load_job(source: str, *, params_override: Optional[List[Dict[str, Any]]] = None,
             client: Any = None) -> Job:
    """Loads a job YAML file (what az ml job create -f reads). Local code
    and input paths stay relative to the file's folder. The file is parsed
    by the server of ``client`` (default: MLClient.from_config())."""
    job = _load("job", Job._from_rest, source, params_override, client)
    job._base_path = os.path.dirname(os.path.abspath(source))
    return job


def load_compute(source: str, *, params_override: Optional[List[Dict[str, Any]]] = None,
                 client: Any = None) -> Compute:
    """Loads a compute YAML file (what az ml compute create -f reads)."""
    return _load("compute", Compute._from_rest, source, params_override, client)


def load_environment(source: str, *, params_override: Optional[List[Dict[str, Any]]] = None,
                     client: Any = None) -> Environment:
    """Loads an environment YAML file; a conda_file path is read relative to it."""
    d = _parse("environment", source, params_override, getattr(client, "_transport", None))
    env = Environment._from_rest(d["environment"])
    env._source = dict(d["environment"])
    if d.get("conda_path"):
        env.conda_file = d["conda_path"]
        env._source["conda_file"] = d["conda_path"]
    env._base_path = os.path.dirname(os.path.abspath(source))  # type: ignore[attr-defined]
    return env


def load_datastore(source: str, *, params_override: Optional[List[Dict[str, Any]]] = None,
                   client: Any = None) -> Datastore:
    """Loads a datastore YAML file."""
    return _load("datastore", Datastore._from_rest, source, params_override, client)


__all__ = ["Input", "Output", "command", "load_compute", "load_datastore", "load_environment", "load_job"]
