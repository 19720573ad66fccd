"""tide.ml: Azure ML's ``azure.ai.ml`` names for a tide server.

    from tide.ml import MLClient, command, Input, Output, load_job
    from tide.ml.entities import AmlCompute

    ml_client = MLClient.from_config()
    ml_client.compute.begin_create_or_update(AmlCompute(name="cpu", max_instances=2)).result()
"""

from tide.ml._builders import command, load_compute, load_datastore, load_environment, load_job
from tide.ml._client import MLClient
from tide.ml.entities import Input, Output

__all__ = ["Input", "MLClient", "Output", "command", "load_compute", "load_datastore", "load_environment",
           "load_job"]
