"""The Azure ML quickstart, on tide: create a cluster, submit a command job
with a code folder and a data folder, stream its log, download its output
and delete the cluster. With azure-ai-ml, only the imports and the MLClient
line differ.

    python3 examples/python/train_on_cluster.py [--cluster NAME] [--download-path DIR]
"""

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "sdk", "python"))  # without pip install

from tide.ml import Input, MLClient, Output, command, load_environment  # noqa: E402
from tide.ml.entities import AmlCompute  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cluster", default="cpu-cluster-py")
    parser.add_argument("--download-path", default="./python-example-output")
    parser.add_argument("--keep-cluster", action="store_true")
    args = parser.parse_args()

    ml_client = MLClient.from_config()

    cluster = AmlCompute(name=args.cluster, size="Standard_DS3_v2", min_instances=0, max_instances=1,
                         idle_time_before_scale_down=120, tier="Dedicated")
    cluster = ml_client.compute.begin_create_or_update(cluster).result()
    print("cluster %s: %s" % (cluster.name, cluster.provisioning_state))

    env = ml_client.environments.create_or_update(
        load_environment(os.path.join(HERE, "..", "environments", "sklearn.yml"), client=ml_client))
    print("environment %s:%s" % (env.name, env.version))

    job = command(
        code=os.path.join(HERE, "src"),
        command="python train.py --data ${{inputs.digits}} --C ${{inputs.C}} --model ${{outputs.model}}",
        inputs={"digits": Input(type="uri_folder", path=os.path.join(HERE, "data")), "C": 0.5},
        outputs={"model": Output(type="uri_folder")},
        environment="azureml:%s:%s" % (env.name, env.version),
        compute=args.cluster,
        experiment_name="python-sdk",
        display_name="digits from the Python SDK",
    )
    returned = ml_client.jobs.create_or_update(job)
    print("submitted %s" % returned.name)
    ml_client.jobs.stream(returned.name)

    ml_client.jobs.download(returned.name, output_name="model", download_path=args.download_path)
    with open(os.path.join(args.download_path, "named-outputs", "model", "metrics.json")) as f:
        print("downloaded metrics: %s" % json.load(f))

    if not args.keep_cluster:
        ml_client.compute.begin_delete(args.cluster).result()
        print("deleted %s" % args.cluster)


if __name__ == "__main__":
    main()
