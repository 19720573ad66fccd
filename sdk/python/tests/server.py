"""A real `tide server` for the SDK's tests: its own data dir, config
folder and port, started from $TIDE_BIN (make test builds bin/tide)."""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def tide_bin() -> str:
    path = os.environ.get("TIDE_BIN") or os.path.join(REPO, "bin", "tide")
    if not os.path.isfile(path):
        raise RuntimeError("%s not found: run 'make build' (make test does) or set TIDE_BIN" % path)
    return os.path.abspath(path)


class Server:
    """Starts a server; stop() ends it and every agent it started."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="tide-sdk-test-")
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        self.port = s.getsockname()[1]
        s.close()
        self.env = dict(os.environ, XDG_CONFIG_HOME=os.path.join(self.dir, "config"),
                        XDG_DATA_HOME=os.path.join(self.dir, "share"), HOME=os.path.join(self.dir, "home"))
        for k in ("TIDE_SERVER", "TIDE_TOKEN", "TIDE_WORKSPACE", "TIDE_CONTEXT"):
            self.env.pop(k, None)
        os.makedirs(self.env["HOME"])
        self.log = open(os.path.join(self.dir, "server.log"), "wb")
        self.data = os.path.join(self.dir, "data")
        self.proc = subprocess.Popen([tide_bin(), "server", "--data-dir", self.data,
                                     "--listen", "127.0.0.1:%d" % self.port],
                                    env=self.env, stdout=self.log, stderr=subprocess.STDOUT)
        self.endpoint = "http://127.0.0.1:%d" % self.port
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(self.endpoint + "/readyz", timeout=2):
                    break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("tide server did not start:\n" + self.tail())
                time.sleep(0.1)
        self.config = self._config_path()

    def _config_path(self) -> str:
        deadline = time.monotonic() + 10
        path = os.path.join(self.env["XDG_CONFIG_HOME"], "tide", "config.json")
        while not os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.05)
        return path

    def tail(self) -> str:
        self.log.flush()
        with open(os.path.join(self.dir, "server.log"), "rb") as f:
            return f.read()[-4000:].decode("utf-8", "replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        for f in glob.glob(os.path.join(self.data, "locations", "*", "nodes", "*", "node.json")):
            try:
                with open(f) as fh:
                    pid = int(json.load(fh).get("pid", 0))
                with open("/proc/%d/cmdline" % pid, "rb") as fh:
                    if os.path.dirname(f).encode() in fh.read():
                        os.killpg(pid, signal.SIGKILL)
            except (OSError, ValueError):
                pass
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)
