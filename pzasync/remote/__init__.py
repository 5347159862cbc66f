"""Environments outside the training process (docs/remote.md): a binary protocol (protocol.py), `serve` for
any PettingZoo AEC env (server.py), `connect` and the batched `Connection` (client.py), servers launched from
`cmd:` env ids (launch.py). Env copies over it live in runtime/copies/remote.py.

This package sits just below `core` (it needs only gymnasium, pettingzoo and pzasync.errors), so that
`make_env` can turn a remote env id into a connected env."""

from __future__ import annotations

from pzasync.remote.address import Address, is_remote_id
from pzasync.remote.client import Connection, RemoteEnv, connect
from pzasync.remote.parallel import RemoteParallelEnv, connect_parallel
from pzasync.remote.server import EnvServer, serve

__all__ = ["Address", "Connection", "EnvServer", "RemoteEnv", "RemoteParallelEnv", "connect", "connect_parallel",
           "is_remote_id", "serve"]
