"""Operations groups of MLClient: compute, jobs, environments, data, datastores."""

from tide.ml.operations._compute import ComputeOperations
from tide.ml.operations._assets import DataOperations, DatastoreOperations, EnvironmentOperations
from tide.ml.operations._job import JobOperations

__all__ = ["ComputeOperations", "DataOperations", "DatastoreOperations", "EnvironmentOperations", "JobOperations"]
