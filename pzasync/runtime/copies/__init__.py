"""The actor's env copies behind one interface (`EnvCopies`, `EnvCopiesFactory`: protocol.py), stepped in the
actor's own process (local.py) or in env worker processes (workers.py, their wire codec in wire.py). A new
kind of copies (envs served by another process) implements the protocol and is chosen in `copies_for`."""

from __future__ import annotations

from typing import Any

from pzasync.runtime.copies.local import LocalCopies, LocalEnvs
from pzasync.runtime.copies.protocol import Answer, EnvCopies, EnvCopiesFactory
from pzasync.runtime.copies.workers import EnvWorkers, WorkerCopies

__all__ = ["Answer", "EnvCopies", "EnvCopiesFactory", "EnvWorkers", "LocalCopies", "LocalEnvs", "WorkerCopies",
           "copies_for"]


def copies_for(plan: Any) -> EnvCopiesFactory:
    """An actor's env copies as its run plan asks: `envs_per_actor` copies, stepped by `env_workers` worker
    processes, or in the actor's process when there are none."""
    cfg = plan.config
    if cfg.env_workers:
        return EnvWorkers(plan.env_spec, plan.envs_per_actor, cfg.env_workers, cfg.heartbeat_timeout_s,
                          run_id=plan.run_id)
    return LocalEnvs([plan.env_spec.make() for _ in range(plan.envs_per_actor)], plan.env_spec.name)
