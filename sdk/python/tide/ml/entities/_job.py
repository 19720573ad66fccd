"""Jobs: command jobs (and the pipeline and sweep shapes), their inputs and
outputs, with azure.ai.ml's names."""

from __future__ import annotations

from typing import Any, Dict, Optional, Union

from tide.ml.entities._resource import Resource, _Settings


class Input(_Settings):
    """A job input: a file or folder (``type`` uri_file / uri_folder, with
    ``path`` local, ``azureml://``, ``https://`` or ``file://``) or a literal
    (``type`` string, integer, number, boolean, with ``default``)."""

    _fields = ("type", "path", "mode", "default", "optional", "description")

    def __init__(self, *, type: str = "uri_folder", path: Optional[str] = None, mode: Optional[str] = None,
                 default: Any = None, optional: Optional[bool] = None,
                 description: Optional[str] = None) -> None:
        self.type = type
        self.path = path
        self.mode = mode
        self.default = default
        self.optional = optional
        self.description = description


class Output(_Settings):
    """A job output: a folder (or file) the job writes to ${{outputs.NAME}}."""

    _fields = ("type", "path", "mode", "description")

    def __init__(self, *, type: str = "uri_folder", path: Optional[str] = None, mode: Optional[str] = None,
                 description: Optional[str] = None) -> None:
        self.type = type
        self.path = path
        self.mode = mode
        self.description = description


class JobResourceConfiguration(_Settings):
    """How many nodes a job takes and of what size (serverless)."""

    _fields = ("instance_count", "instance_type", "shm_size")

    def __init__(self, *, instance_count: Optional[int] = None, instance_type: Optional[str] = None,
                 shm_size: Optional[str] = None) -> None:
        self.instance_count = instance_count
        self.instance_type = instance_type
        self.shm_size = shm_size


class PyTorchDistribution(_Settings):
    """torch.distributed: process_count_per_instance processes per node."""

    _fields = ("type", "process_count_per_instance")

    def __init__(self, *, process_count_per_instance: Optional[int] = None) -> None:
        self.type = "pytorch"
        self.process_count_per_instance = process_count_per_instance


class MpiDistribution(_Settings):
    """MPI: process_count_per_instance ranks per node."""

    _fields = ("type", "process_count_per_instance")

    def __init__(self, *, process_count_per_instance: Optional[int] = None) -> None:
        self.type = "mpi"
        self.process_count_per_instance = process_count_per_instance


class TensorFlowDistribution(_Settings):
    """TensorFlow: workers and parameter servers (TF_CONFIG)."""

    _fields = ("type", "worker_count", "parameter_server_count")

    def __init__(self, *, worker_count: Optional[int] = None,
                 parameter_server_count: Optional[int] = None) -> None:
        self.type = "tensorflow"
        self.worker_count = worker_count
        self.parameter_server_count = parameter_server_count


class Job(Resource):
    """A job of any type; get/list return the subclass for its type."""

    _fields = Resource._fields + ("type", "display_name", "experiment_name", "compute")

    def __init__(self, *, name: Optional[str] = None, type: str = "command", display_name: Optional[str] = None,
                 experiment_name: Optional[str] = None, compute: Optional[str] = None, **kwargs: Any) -> None:
        super().__init__(name=name, **kwargs)
        self.type = type
        self.display_name = display_name
        self.experiment_name = experiment_name
        self.compute = compute
        #: Folder of the YAML file the job came from: local paths in it
        #: (code, inputs) are relative to this folder, as in Azure ML.
        self._base_path: Optional[str] = None

    @property
    def studio_url(self) -> Optional[str]:
        """The job's page in tide Studio, once submitted."""
        return self._rest.get("studio_url")

    @staticmethod
    def _from_rest(d: Dict[str, Any]) -> "Job":
        cls = {"command": CommandJob, "pipeline": PipelineJob, "sweep": SweepJob}.get(str(d.get("type", "command")), Job)
        obj = cls.__new__(cls)
        Resource.__init__(obj, name=d.get("name"), description=d.get("description"), tags=d.get("tags"))
        for f in cls._fields:
            setattr(obj, f, None)
        obj._base_path = None
        obj._load_status(d)
        return obj


class CommandJob(Job):
    """A command run on a compute, with code, environment, inputs and outputs."""

    _fields = Job._fields + ("command", "code", "environment", "environment_variables", "inputs", "outputs",
                             "resources", "distribution", "limits", "queue_settings", "identity", "tide")

    def __init__(self, *, command: Optional[str] = None, code: Optional[str] = None,
                 environment: Union[str, Any, None] = None,
                 environment_variables: Optional[Dict[str, str]] = None,
                 inputs: Optional[Dict[str, Any]] = None, outputs: Optional[Dict[str, Any]] = None,
                 resources: Union[JobResourceConfiguration, Dict[str, Any], None] = None,
                 distribution: Union[_Settings, Dict[str, Any], None] = None,
                 limits: Optional[Dict[str, Any]] = None, queue_settings: Optional[Dict[str, Any]] = None,
                 identity: Optional[Dict[str, Any]] = None, tide: Optional[Dict[str, Any]] = None,
                 **kwargs: Any) -> None:
        super().__init__(type="command", **kwargs)
        self.command = command
        self.code = code
        self.environment = environment
        self.environment_variables = environment_variables
        self.inputs = inputs
        self.outputs = outputs
        self.resources = resources
        self.distribution = distribution
        self.limits = limits
        self.queue_settings = queue_settings
        self.identity = identity
        self.tide = tide

    def _to_rest(self) -> Dict[str, Any]:
        out = super()._to_rest()
        env = self.environment
        if env is not None and hasattr(env, "name") and hasattr(env, "version") and getattr(env, "name", None):
            out["environment"] = "azureml:%s:%s" % (env.name, env.version) if env.version else "azureml:%s@latest" % env.name
        elif env is not None and hasattr(env, "_to_rest"):
            out["environment"] = {k: v for k, v in env._to_rest().items() if k in ("image", "conda_file", "build")}
        for key in ("inputs",):
            if self.inputs:
                out[key] = {k: (v._to_rest() if hasattr(v, "_to_rest") else v) for k, v in self.inputs.items()}
        return out


class PipelineJob(Job):
    """A pipeline of steps; sent as it is, for servers that run pipelines."""

    _fields = Job._fields + ("jobs", "inputs", "outputs", "settings")

    def __init__(self, *, jobs: Optional[Dict[str, Any]] = None, inputs: Optional[Dict[str, Any]] = None,
                 outputs: Optional[Dict[str, Any]] = None, settings: Optional[Dict[str, Any]] = None,
                 **kwargs: Any) -> None:
        super().__init__(type="pipeline", **kwargs)
        self.jobs = jobs
        self.inputs = inputs
        self.outputs = outputs
        self.settings = settings


class SweepJob(Job):
    """A hyperparameter sweep; sent as it is, for servers that run sweeps."""

    _fields = Job._fields + ("trial", "search_space", "sampling_algorithm", "objective", "limits",
                             "early_termination", "inputs", "outputs")

    def __init__(self, *, trial: Any = None, search_space: Optional[Dict[str, Any]] = None,
                 sampling_algorithm: Any = None, objective: Optional[Dict[str, Any]] = None,
                 limits: Optional[Dict[str, Any]] = None, early_termination: Optional[Dict[str, Any]] = None,
                 inputs: Optional[Dict[str, Any]] = None, outputs: Optional[Dict[str, Any]] = None,
                 **kwargs: Any) -> None:
        super().__init__(type="sweep", **kwargs)
        self.trial = trial
        self.search_space = search_space
        self.sampling_algorithm = sampling_algorithm
        self.objective = objective
        self.limits = limits
        self.early_termination = early_termination
        self.inputs = inputs
        self.outputs = outputs
