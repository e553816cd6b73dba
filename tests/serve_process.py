"""An `aotplan serve` process for the serving tests: started on free loopback ports,
waited for (bounded), stopped with SIGTERM."""

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import psutil


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServeProcess:
    def __init__(self, plans, *args, timeout=240):
        self.http_port, self.grpc_port = free_port(), free_port()
        cmd = [sys.executable, "-m", "aotplan.cli", "serve", *plans, "--http-port", str(self.http_port),
               "--grpc-port", str(self.grpc_port), *args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.lines, self.errors = [], []
        threading.Thread(target=self._read, args=(self.proc.stdout, self.lines), daemon=True).start()
        threading.Thread(target=self._read, args=(self.proc.stderr, self.errors), daemon=True).start()
        deadline = time.monotonic() + timeout
        while not any(line.startswith("ready:") for line in self.lines):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"aotplan serve did not get ready (rc {self.proc.returncode}):\n"
                                   + "".join(self.lines + self.errors)[-3000:])
            time.sleep(0.05)
        self.http = f"127.0.0.1:{self.http_port}"
        self.grpc = f"127.0.0.1:{self.grpc_port}"

    @staticmethod
    def _read(stream, into):
        for line in stream:
            into.append(line)

    def listening(self):
        """-> the addresses the server process listens on (ip, port)."""
        p = psutil.Process(self.proc.pid)
        conns = (getattr(p, "net_connections", None) or p.connections)(kind="inet")  # (psutil < 6: connections)
        return sorted({(c.laddr.ip, c.laddr.port) for c in conns if c.status == psutil.CONN_LISTEN})

    def steps(self, model):
        import urllib.request

        text = urllib.request.urlopen(f"http://{self.http}/metrics", timeout=10).read().decode()
        m = re.search(rf'^aotplan_steps_total{{model="{re.escape(model)}"}} ([0-9.e+]+)$', text, re.M)
        return int(float(m.group(1))) if m else 0

    def stop(self, timeout=60):
        """SIGTERM -> the exit code (the process is killed if it does not end in time)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                return None
        return self.proc.returncode
