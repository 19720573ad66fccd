"""A real `tide server` for the SDK's tests: its own data dir, config
folder and port, started from $TIDE_BIN (make test builds bin/tide)."""

from __future__ import annotations

import fcntl
import glob
import json
import os
import random
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
        self.env = dict(os.environ, XDG_CONFIG_HOME=os.path.join(self.dir, "config"),
                        XDG_DATA_HOME=os.path.join(self.dir, "share"), HOME=os.path.join(self.dir, "home"))
        for k in ("TIDE_SERVER", "TIDE_TOKEN", "TIDE_WORKSPACE", "TIDE_CONTEXT"):
            self.env.pop(k, None)
        os.makedirs(self.env["HOME"])
        self.log = open(os.path.join(self.dir, "server.log"), "wb")
        self.data = os.path.join(self.dir, "data")
        self.config = os.path.join(self.env["XDG_CONFIG_HOME"], "tide", "config.json")
        # Should a program outside the tests take the port first, the
        # server exits (it listens before anything else): try another.
        for _ in range(3):
            if self._start(free_port()):
                return
        raise RuntimeError("tide server did not start:\n" + self.tail())

    def _start(self, port: int) -> bool:
        """Starts the server on port and waits until it is ready; False
        when it exited first."""
        self.port = port
        self.endpoint = "http://127.0.0.1:%d" % port
        self.proc = subprocess.Popen([tide_bin(), "server", "--data-dir", self.data,
                                     "--listen", "127.0.0.1:%d" % port],
                                    env=self.env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while True:
            # Ready once /readyz answers and this server wrote its client
            # config (after it has its port: another server that answers
            # there writes none here).
            try:
                with urllib.request.urlopen(self.endpoint + "/readyz", timeout=2):
                    if os.path.exists(self.config):
                        return True
            except OSError:
                pass
            if self.proc.poll() is not None:
                return False
            if time.monotonic() > deadline:
                raise RuntimeError("tide server did not start:\n" + self.tail())
            time.sleep(0.1)

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


_held = []  # the port locks, open until this process exits


def free_port() -> int:
    """A port for a server, taken as Go's internal/freeport takes them:
    below the kernel's ephemeral range, which the kernel never hands out
    by itself (a port from binding port 0 and closing is handed out again
    to other listeners and connections), locked for this process's life
    in $TMPDIR/tide-ports (shared with the Go tests' locks), and free now."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            eph = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        eph = 0
    if eph - 10000 < 1024:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]
    lo, n = eph - 10000, 10000
    d = os.path.join(tempfile.gettempdir(), "tide-ports")
    os.makedirs(d, mode=0o777, exist_ok=True)
    start = random.randrange(n)
    for i in range(n):
        port = lo + (start + i) % n
        try:
            fd = os.open(os.path.join(d, str(port)), os.O_CREAT | os.O_RDONLY, 0o666)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            with socket.socket() as s:
                s.bind(("0.0.0.0", port))
        except OSError:
            os.close(fd)
            continue
        _held.append(fd)
        return port
    raise RuntimeError("no free port in %d-%d" % (lo, lo + n - 1))
