"""Entities, named as azure.ai.ml.entities names them."""

from tide.ml.entities._assets import Data, Datastore, Environment, LocalDatastore
from tide.ml.entities._compute import (AmlCompute, AmlComputeSshSettings, Compute, ComputeInstance,
                                       ComputeInstanceSshSettings, IdentityConfiguration, NetworkSettings)
from tide.ml.entities._job import (CommandJob, Input, Job, JobResourceConfiguration, MpiDistribution, Output,
                                   PipelineJob, PyTorchDistribution, SweepJob, TensorFlowDistribution)

__all__ = [
    "AmlCompute", "AmlComputeSshSettings", "CommandJob", "Compute", "ComputeInstance",
    "ComputeInstanceSshSettings", "Data", "Datastore", "Environment", "IdentityConfiguration", "Input", "Job",
    "JobResourceConfiguration", "LocalDatastore", "MpiDistribution", "NetworkSettings", "Output", "PipelineJob",
    "PyTorchDistribution", "SweepJob", "TensorFlowDistribution",
]
