"""A connection's frames over a non-blocking socket, with one system call per frame on the hot path.

A Python socket with a timeout costs a poll() before every send and recv (that is how CPython implements
timeouts), and reading a frame as its header then its body costs another recv. A `FrameStream` keeps its
socket non-blocking: `send` writes a frame with one send() and waits only while the kernel's buffer is full;
`fill` takes whatever has arrived with one recv() into a preallocated buffer, and `next_frame` cuts complete
frames from what was received, so several replies that arrive together cost one recv. Both sides of the
protocol use it (client.py, server.py).
"""

from __future__ import annotations

import select
import socket
import time

from pzasync.remote.protocol import parse_header

#: Bytes one recv() may take at once.
_CHUNK = 1 << 18


class FrameStream:
    """Frames to and from `sock` (made non-blocking), named `source` in errors."""

    def __init__(self, sock: socket.socket, source: str) -> None:
        sock.setblocking(False)
        self.sock, self.source = sock, source
        self._received = bytearray()
        self._chunk = bytearray(_CHUNK)
        self._chunk_view = memoryview(self._chunk)

    def send(self, data: bytes, deadline: float | None) -> None:
        """Write all of `data`; TimeoutError if the peer does not take it before `deadline` (time.monotonic),
        OSError if the connection is gone."""
        try:
            sent = self.sock.send(data)
        except BlockingIOError:
            sent = 0
        if sent < len(data):
            self._send_rest(memoryview(data)[sent:], deadline)

    def _send_rest(self, rest: memoryview, deadline: float | None) -> None:
        while rest:
            if not select.select([], [self.sock], [], _left(deadline, self.source))[1]:
                continue
            try:
                rest = rest[self.sock.send(rest):]
            except BlockingIOError:
                pass

    def next_frame(self) -> tuple[int, memoryview] | None:
        """The next complete frame already received, as (kind, body), or None; RemoteProtocolError for a
        header no frame can have."""
        received = self._received
        if len(received) < 4:
            return None
        length = parse_header(received[:4], self.source)
        if len(received) < 4 + length:
            return None
        kind, body = received[4], bytes(received[5:4 + length])
        del received[:4 + length]
        return kind, memoryview(body)

    def fill(self) -> bool:
        """Take what has arrived, without waiting: whether anything had. EOFError if the peer closed."""
        try:
            n = self.sock.recv_into(self._chunk)
        except (BlockingIOError, InterruptedError):
            return False
        if n == 0:
            raise EOFError(f"{self.source}: connection closed")
        self._received += self._chunk_view[:n]
        return True

    def read(self, deadline: float | None) -> tuple[int, memoryview]:
        """The next frame, waiting for it until `deadline` (time.monotonic; None: for ever): TimeoutError
        after it, EOFError if the peer closes first."""
        while True:
            found = self.next_frame()
            if found is not None:
                return found
            if not self.fill():
                select.select([self.sock], [], [], _left(deadline, self.source))


def _left(deadline: float | None, source: str) -> float | None:
    """Seconds until `deadline` (None: no limit); TimeoutError once it has passed."""
    if deadline is None:
        return None
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError(f"{source}: no complete frame before the deadline")
    return left
