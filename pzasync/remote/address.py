"""Where a remote env is served: `unix:///path/to.sock` or `tcp://host:port` (docs/remote.md, "Addresses"),
and the sockets that listen there and connect there."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

from pzasync.errors import EnvSpecError

SCHEMES = ("unix://", "tcp://", "cmd:")


def is_remote_id(text: object) -> bool:
    """Whether an env id names a remote env: an address or a `cmd:` template that launches servers."""
    return isinstance(text, str) and text.startswith(SCHEMES)


@dataclass(frozen=True)
class Address:
    """A parsed address: a Unix socket path, or a TCP host and port."""

    path: str | None = None
    host: str | None = None
    port: int | None = None

    @classmethod
    def parse(cls, text: str) -> Address:
        if text.startswith("unix://"):
            path = text[len("unix://"):]
            if not path:
                raise EnvSpecError(f"address {text!r} names no socket path; expected unix:///path/to.sock")
            return cls(path=path)
        if text.startswith("tcp://"):
            host, sep, port = text[len("tcp://"):].rpartition(":")
            if not sep or not port.isdigit() or not host:
                raise EnvSpecError(f"address {text!r}: expected tcp://host:port")
            return cls(host=host.strip("[]"), port=int(port))
        raise EnvSpecError(f"address {text!r}: expected unix:///path/to.sock or tcp://host:port")

    def __str__(self) -> str:
        return f"unix://{self.path}" if self.path is not None else f"tcp://{self.host}:{self.port}"

    def connect(self, timeout_s: float) -> socket.socket:
        """A connected, blocking socket (TCP without Nagle's delay: frames are small and answered at once)."""
        if self.path is not None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        else:
            sock = socket.socket(socket.AF_INET6 if ":" in (self.host or "") else socket.AF_INET, socket.SOCK_STREAM)
        sock.settimeout(timeout_s)
        try:
            sock.connect(self.path if self.path is not None else (self.host, self.port))
        except BaseException:
            sock.close()
            raise
        if self.path is None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def listen(self) -> tuple[socket.socket, Address]:
        """A listening socket here, and the address it really has (a TCP port 0 becomes the port given)."""
        if self.path is not None:
            if os.path.exists(self.path):
                os.unlink(self.path)  # a stale socket file of a server that did not clean up
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.bind(self.path)
            sock.listen(64)
            return sock, self
        family = socket.AF_INET6 if ":" in (self.host or "") else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        sock.listen(64)
        return sock, Address(host=self.host, port=sock.getsockname()[1])
