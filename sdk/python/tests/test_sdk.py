"""The SDK against a real tide server with local nodes: the seed-shaped
script end to end, loading Azure ML files, and errors as azure-core raises
them."""

from __future__ import annotations

import http.server
import io
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from server import REPO, Server  # noqa: E402
from tide.core.exceptions import (ClientAuthenticationError, HttpResponseError,  # noqa: E402
                                  ResourceNotFoundError, ServiceRequestError)
from tide.ml import Input, MLClient, Output, command, load_compute, load_job  # noqa: E402
from tide.ml._http import Transport  # noqa: E402
from tide.ml.entities import AmlCompute, AmlComputeSshSettings, ComputeInstance, Environment  # noqa: E402
from tide.ml.exceptions import JobException, ValidationException  # noqa: E402

AZURE = os.path.join(REPO, "..", "shared", "data", "azureml-examples", "cli")


class SDKTest(unittest.TestCase):
    server: Server
    client: MLClient

    @classmethod
    def setUpClass(cls) -> None:
        cls.server = Server()
        os.environ["XDG_CONFIG_HOME"] = cls.server.env["XDG_CONFIG_HOME"]
        cls.client = MLClient.from_config()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.server.stop()

    def test_seed_script(self) -> None:
        """examples/python/train_on_cluster.py: create a cluster, submit a
        command job with code and a uri_folder input, stream, download, delete."""
        out = tempfile.mkdtemp(dir=self.server.dir)
        script = os.path.join(REPO, "examples", "python", "train_on_cluster.py")
        res = subprocess.run([sys.executable, script, "--cluster", "seed", "--download-path", out],
                             env=self.server.env, capture_output=True, text=True, timeout=600)
        self.assertEqual(res.returncode, 0, "script failed:\n%s\n%s\nserver:\n%s" % (res.stdout, res.stderr, self.server.tail()))
        self.assertIn("read 400 images", res.stdout)  # the streamed log of the job
        self.assertIn("accuracy: ", res.stdout)
        with open(os.path.join(out, "named-outputs", "model", "metrics.json")) as f:
            metrics = json.load(f)
        self.assertEqual(metrics["images"], 400)
        self.assertEqual(metrics["C"], 0.5)
        self.assertGreater(metrics["accuracy"], 0.8)
        self.assertTrue(os.path.isfile(os.path.join(out, "named-outputs", "model", "model.pkl")))
        with self.assertRaises(ResourceNotFoundError):
            self.client.compute.get("seed")

    def test_compute_entities(self) -> None:
        c = AmlCompute(name="sdk-lp", size="Standard_DS3_v2", max_instances=2, tier="LowPriority",
                       idle_time_before_scale_down=300,
                       ssh_settings=AmlComputeSshSettings(admin_username="azureuser", admin_password="s3cret-pw"))
        got = self.client.compute.begin_create_or_update(c).result(timeout=60)
        self.assertEqual(got.provisioning_state, "Succeeded")
        self.assertEqual(got.tier, "low_priority")
        self.assertEqual(got.max_instances, 2)
        names = [x.name for x in self.client.compute.list(compute_type="amlcompute")]
        self.assertIn("sdk-lp", names)
        self.assertNotIn("s3cret-pw", json.dumps(self.client.compute.get("sdk-lp")._to_dict()))
        self.assertEqual(self.client.compute.list_nodes("sdk-lp"), [])
        self.assertTrue(any(s["name"] == "Standard_DS3_v2" for s in self.client.compute.list_sizes()))
        self.assertTrue(any(u["family"] == "standardDSv2Family" for u in self.client.compute.list_usage()))
        self.client.compute.begin_delete("sdk-lp").result(timeout=60)

    def test_compute_instance(self) -> None:
        """A ComputeInstance is created Running, stopped and started with
        the begin_* pollers, as azure-ai-ml does."""
        ci = ComputeInstance(name="sdk-ci", size="Standard_DS3_v2", idle_time_before_shutdown_minutes=60)
        got = self.client.compute.begin_create_or_update(ci).result(timeout=120)
        self.assertEqual(got.type, "computeinstance")
        self.assertEqual(self.client.compute.begin_stop("sdk-ci").result(timeout=120).state, "Stopped")
        self.assertEqual(self.client.compute.begin_start("sdk-ci").result(timeout=120).state, "Running")
        with self.assertRaises(HttpResponseError) as cm:
            self.client.compute.begin_start("sdk-ci")  # already running
        self.assertEqual(cm.exception.status_code, 409)
        self.client.compute.begin_delete("sdk-ci").result(timeout=120)

    def test_load_azure_files(self) -> None:
        c = load_compute(os.path.join(AZURE, "resources", "compute", "cluster-basic.yml"), client=self.client,
                         params_override=[{"name": "loaded-basic"}])
        self.assertEqual(c.name, "loaded-basic")
        self.client.compute.begin_create_or_update(c).result(timeout=60)
        j = load_job(os.path.join(AZURE, "jobs", "basics", "hello-world.yml"), client=self.client,
                     params_override=[{"compute": "loaded-basic"}])
        self.assertEqual(j.command, 'echo "hello world"')
        returned = self.client.jobs.create_or_update(j)
        buf = io.StringIO()
        done = self.client.jobs.stream(returned.name, file=buf)
        self.assertEqual(done.status, "Completed")
        self.assertIn("hello world", buf.getvalue())
        self.assertIn(returned.name, [x.name for x in self.client.jobs.list(compute="loaded-basic")])

    def test_bad_file_reports_lines(self) -> None:
        path = os.path.join(self.server.dir, "bad.yml")
        with open(path, "w") as f:
            f.write("type: amlcompute\nname: bad\nmax_instances: lots\nbanana: 1\n")
        with self.assertRaises(ValidationException) as cm:
            load_compute(path, client=self.client)
        lines = {e.get("line"): e["field"] + ": " + e["message"] for e in cm.exception.errors}
        self.assertIn("max_instances", lines.get(3, ""))
        self.assertIn("banana", lines.get(4, ""))
        self.assertIn("bad.yml", str(cm.exception))

    def test_unbound_input_is_the_servers_validation_error(self) -> None:
        job = command(command="echo ${{inputs.missing}}", compute="nowhere")
        with self.assertRaises(ValidationException) as cm:
            self.client.jobs.create_or_update(job)
        self.assertEqual(cm.exception.status_code, 400)
        self.assertIn("inputs.missing", str(cm.exception))

    def test_failed_job_raises_on_stream(self) -> None:
        self.client.compute.begin_create_or_update(AmlCompute(name="sdk-fail", max_instances=1)).result(timeout=60)
        j = self.client.jobs.create_or_update(command(command="echo about to fail; exit 3", compute="sdk-fail"))
        with self.assertRaises(JobException) as cm:
            self.client.jobs.stream(j.name, file=io.StringIO())
        self.assertEqual(cm.exception.job.status, "Failed")

    def test_wrong_token(self) -> None:
        bad = MLClient(endpoint=self.server.endpoint, token="not-a-token")
        with self.assertRaises(ClientAuthenticationError) as cm:
            list(bad.compute.list())
        self.assertEqual(cm.exception.status_code, 401)
        self.assertTrue(cm.exception.message)

    def test_not_found(self) -> None:
        with self.assertRaises(ResourceNotFoundError) as cm:
            self.client.jobs.get("no-such-job")
        self.assertIn("no-such-job", str(cm.exception))

    def test_sweep(self) -> None:
        """A sweep file loaded and submitted: its trial's code is uploaded, its
        trials are listed by parent_job_name, and it ends with the best."""
        d = tempfile.mkdtemp(dir=self.server.dir)
        os.makedirs(os.path.join(d, "src"))
        with open(os.path.join(d, "src", "f.py"), "w") as f:
            f.write("import sys\nx = float(sys.argv[1])\nprint(f'##tide metric loss={(x - 0.3) ** 2}')\n")
        with open(os.path.join(d, "sweep.yml"), "w") as f:
            f.write("type: sweep\ncompute: sdk-sweep\ntrial:\n  code: src\n  command: /usr/bin/python3 f.py ${{search_space.x}}\n"
                    "search_space:\n  x:\n    type: choice\n    values: [0.1, 0.3, 0.9]\nsampling_algorithm: grid\n"
                    "objective:\n  primary_metric: loss\n  goal: minimize\nlimits:\n  max_concurrent_trials: 1\n")
        self.client.compute.begin_create_or_update(AmlCompute(name="sdk-sweep", max_instances=1)).result(timeout=60)
        job = self.client.jobs.create_or_update(load_job(os.path.join(d, "sweep.yml"), client=self.client))
        self.assertEqual(job.type, "sweep")
        for _ in range(600):
            j = self.client.jobs.get(job.name)
            if j.status in ("Completed", "Failed", "Canceled"):
                break
            time.sleep(0.2)
        self.assertEqual(j.status, "Completed", self.server.tail())
        trials = [t.name for t in self.client.jobs.list(parent_job_name=job.name)]
        self.assertEqual(trials, [job.name + "_0", job.name + "_1", job.name + "_2"])
        self.assertEqual(j._rest["best_trial"], job.name + "_1")

    def test_environment_versions(self) -> None:
        e1 = self.client.environments.create_or_update(Environment(name="sdk-env", image="python:3.11-slim"))
        e2 = self.client.environments.create_or_update(Environment(name="sdk-env", image="python:3.12-slim"))
        self.assertEqual((e1.version, e2.version), ("1", "2"))
        self.assertEqual(self.client.environments.get("sdk-env", label="latest").image, "python:3.12-slim")
        self.assertEqual(len(list(self.client.environments.list(name="sdk-env"))), 2)


class RetryTest(unittest.TestCase):
    """Idempotent calls are retried with back-off; POST only after a 429."""

    def test_retries(self) -> None:
        hits = {"GET": 0, "POST": 0}

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self) -> None:
                hits[self.command] += 1
                if hits[self.command] < 3:
                    self.send_response(503)
                    self.send_header("Retry-After", "0")
                    self.send_header("Content-Type", "application/problem+json")
                    self.end_headers()
                    self.wfile.write(b'{"status":503,"code":"Unavailable","detail":"store unavailable"}')
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b'{"ok":true}')

            do_GET = do_POST = _answer

            def log_message(self, *args: object) -> None:
                pass

        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        try:
            t = Transport("http://127.0.0.1:%d" % srv.server_address[1], "tok", backoff=0.01)
            self.assertEqual(t.json("GET", "/x"), {"ok": True})
            self.assertEqual(hits["GET"], 3)
            with self.assertRaises(HttpResponseError) as cm:
                t.json("POST", "/x", body={})
            self.assertEqual(cm.exception.status_code, 503)
            self.assertEqual(hits["POST"], 1)
        finally:
            srv.shutdown()

    def test_throttled_post(self) -> None:
        """A POST refused with 429 is sent again after Retry-After, with a
        warning; after the last attempt the 429 is raised."""
        hits = {"POST": 0}
        refuse = {"n": 2}

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                hits["POST"] += 1
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if refuse["n"] != 0:
                    refuse["n"] -= 1
                    self.send_response(429)
                    self.send_header("Retry-After", "0")
                    self.send_header("Content-Type", "application/problem+json")
                    self.end_headers()
                    self.wfile.write(b'{"status":429,"code":"TooManyRequests","detail":"workspace ws submits too fast",'
                                     b'"limit":"limits.submit_rate","workspace":"ws","retry_after":1}')
                    return
                self.send_response(201)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b'{"name":"j1"}')

            def log_message(self, *args: object) -> None:
                pass

        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        try:
            t = Transport("http://127.0.0.1:%d" % srv.server_address[1], "tok", retries=3, backoff=0.01)
            with self.assertLogs("tide", "WARNING") as logs:
                self.assertEqual(t.json("POST", "/jobs", body={}), {"name": "j1"})
            self.assertEqual(hits["POST"], 3)
            self.assertIn("throttled by the tide server (limits.submit_rate): (TooManyRequests) workspace ws submits too fast; "
                          "sending again in 0 s (attempt 2 of 3)", logs.output[0])
            refuse["n"], hits["POST"] = -1, 0
            with self.assertLogs("tide", "WARNING"), self.assertRaises(HttpResponseError) as cm:
                t.json("POST", "/jobs", body={})
            self.assertEqual((cm.exception.status_code, hits["POST"]), (429, 3))
            self.assertEqual(cm.exception.problem["workspace"], "ws")
        finally:
            srv.shutdown()

    def test_unreachable(self) -> None:
        t = Transport("http://127.0.0.1:9", "tok", retries=2, backoff=0.01)
        with self.assertRaises(ServiceRequestError) as cm:
            t.json("GET", "/x")
        self.assertIn("cannot reach", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
