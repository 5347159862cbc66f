"""Servers launched from a `cmd:` env id: `cmd:node examples/remote_node/server.js --socket {socket}`.

Each server gets its own Unix socket in a private temporary directory (`{socket}`; `{python}` is this
Python). Its stderr goes to a file there, so that an error can quote its tail; it is started in its own
session (a Ctrl-C at the terminal is the trainer's to handle) and asked to die with its parent (Linux). `close`
stops it (SIGTERM, then SIGKILL) and removes the directory.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from pzasync.errors import EnvSpecError, RemoteEnvError
from pzasync.remote.address import Address

STDERR_TAIL_BYTES = 2000


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class ServerProcess:
    """One launched server: its process, socket address and stderr file."""

    def __init__(self, template: str, index: int, instances: int | None = None) -> None:
        self.template, self.index, self.instances = template, index, instances
        self.dir = tempfile.mkdtemp(prefix="pzremote-")
        path = os.path.join(self.dir, "env.sock")
        self.socket_path = path
        self.address = Address(path=path)
        try:
            command = template.format(socket=path, python=sys.executable, instances=instances or 16, index=index)
        except (KeyError, IndexError, ValueError) as exc:
            shutil.rmtree(self.dir, ignore_errors=True)
            raise EnvSpecError(f"cmd: template {template!r}: {exc!r}; its placeholders are {{socket}}, {{python}}, "
                               f"{{instances}} and {{index}}") from None
        self.command = command
        self.args = shlex.split(command)
        self.stderr_path = os.path.join(self.dir, "stderr.log")
        self.label = f"server {index} ({self.args[0] if self.args else command!r}, pid ?)"
        self._stderr = open(self.stderr_path, "wb")
        try:
            self.proc: subprocess.Popen | None = subprocess.Popen(
                self.args, stdin=subprocess.DEVNULL, stdout=self._stderr, stderr=self._stderr,
                start_new_session=True, preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None)
        except OSError as exc:
            self._stderr.close()
            shutil.rmtree(self.dir, ignore_errors=True)
            raise EnvSpecError(f"cmd: cannot start {command!r}: {exc}") from None
        self.label = f"server {index} ({shlex.quote(self.args[0])}, pid {self.proc.pid})"

    def wait_ready(self, timeout_s: float) -> None:
        """Wait until the socket accepts connections; RemoteEnvError if the server exits or takes too long."""
        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc is None or self.proc.poll() is not None:
                raise RemoteEnvError(f"{self.label} exited before listening on {self.address}; "
                                     f"{self.describe_end()}")
            if os.path.exists(self.socket_path):
                try:
                    self.address.connect(1.0).close()
                    return
                except OSError:
                    pass
            if time.monotonic() > deadline:
                raise RemoteEnvError(f"{self.label} did not listen on {self.address} within {timeout_s:g}s; "
                                     f"{self.describe_end(hung=True)}")
            time.sleep(0.02)

    def relaunch(self, timeout_s: float) -> ServerProcess:
        """Stop this server (if it still runs) and start the same command again, ready to connect to (a fresh
        socket directory, the same index)."""
        self.close()
        server = ServerProcess(self.template, self.index, self.instances)
        try:
            server.wait_ready(timeout_s)
        except BaseException:
            server.close()
            raise
        return server

    def stderr_tail(self) -> str:
        try:
            with open(self.stderr_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - STDERR_TAIL_BYTES))
                return f.read().decode(errors="replace").strip()
        except OSError:
            return ""

    def describe_end(self, hung: bool = False) -> str:
        """How the server ended (stopping it first when `hung`): its exit code and the tail of its stderr."""
        proc = self.proc
        if proc is None:
            return "it was stopped"
        if hung and proc.poll() is None:
            proc.kill()
        try:
            code = proc.wait(2.0)
        except subprocess.TimeoutExpired:
            code = None
        state = ("it was stopped" if hung else "it is still running") if code is None else (
            "it was stopped with SIGKILL" if hung and code == -signal.SIGKILL else
            f"it exited with code {code}" if code >= 0 else f"it was killed by signal {signal.Signals(-code).name}")
        tail = self.stderr_tail()
        return state + (f"; the end of its stderr:\n{tail}" if tail else "; its stderr was empty")

    def close(self) -> None:
        """Stop the server and remove its directory; never raises."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            try:
                proc.send_signal(signal.SIGTERM)
                proc.wait(3.0)
            except (OSError, subprocess.TimeoutExpired):
                proc.kill()
                proc.wait(3.0)
        elif proc is not None:
            proc.wait()
        self._stderr.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def launch(env_id: str, count: int, *, timeout_s: float = 60.0, instances: int | None = None) -> list[ServerProcess]:
    """Start `count` servers from a `cmd:` env id and wait until each listens (all stopped if one fails)."""
    template = env_id[len("cmd:"):].strip() if env_id.startswith("cmd:") else env_id
    if "{socket}" not in template:
        raise EnvSpecError(f"env id {env_id!r}: a cmd: template must pass {{socket}} (the Unix socket each server "
                           f"listens on) to the server, e.g. 'cmd:node server.js --socket {{socket}}'")
    servers: list[ServerProcess] = []
    try:
        for i in range(count):
            servers.append(ServerProcess(template, i, instances))
        for server in servers:
            server.wait_ready(timeout_s)
    except BaseException:
        for server in servers:
            server.close()
        raise
    return servers
