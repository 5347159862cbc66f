"""FrameStream (pzasync/remote/stream.py): frames cut from whatever one recv() brought, never waiting for
bytes a header says cannot come."""

from __future__ import annotations

import socket
import time

import pytest

from pzasync.errors import RemoteProtocolError
from pzasync.remote.protocol import Kind, frame
from pzasync.remote.stream import FrameStream


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


def test_two_frames_that_arrive_together_are_both_read_from_one_fill(pair):
    a, b = pair
    stream = FrameStream(b, "test")
    a.sendall(frame(Kind.PONG, b"12345678") + frame(Kind.STATE, b"\x00\x00\x00\x00"))
    assert stream.next_frame() is None
    assert stream.fill()
    first, second = stream.next_frame(), stream.next_frame()
    assert (first[0], bytes(first[1])) == (Kind.PONG, b"12345678")
    assert (second[0], bytes(second[1])) == (Kind.STATE, b"\x00\x00\x00\x00")
    assert stream.next_frame() is None and not stream.fill()


def test_a_frame_split_across_sends_is_read_whole_once_its_last_byte_is_in(pair):
    a, b = pair
    stream = FrameStream(b, "test")
    data = frame(Kind.PONG, bytes(range(200)))
    a.sendall(data[:3])
    stream.fill()
    assert stream.next_frame() is None
    a.sendall(data[3:150])
    stream.fill()
    assert stream.next_frame() is None
    a.sendall(data[150:])
    kind, body = stream.read(time.monotonic() + 5)
    assert (kind, bytes(body)) == (Kind.PONG, bytes(range(200)))


def test_a_header_no_frame_can_have_is_refused_at_once_and_silence_times_out(pair):
    a, b = pair
    stream = FrameStream(b, "peer x")
    with pytest.raises(TimeoutError, match="peer x"):
        stream.read(time.monotonic() + 0.05)
    a.sendall(b"\xff\xff\xff\xff")
    with pytest.raises(RemoteProtocolError, match="peer x: malformed frame"):
        stream.read(time.monotonic() + 5)


def test_a_closed_peer_is_an_eof(pair):
    a, b = pair
    stream = FrameStream(b, "test")
    a.close()
    with pytest.raises(EOFError):
        stream.read(time.monotonic() + 5)
