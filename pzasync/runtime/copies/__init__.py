"""The actor's env copies behind one interface (`EnvCopies`, `EnvCopiesFactory`: protocol.py), stepped in the
actor's own process (local.py), in env worker processes (workers.py, their wire codec in wire.py), or served by
remote env servers (remote.py, docs/remote.md). Each kind is chosen in `copies_for`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pzasync.config.groups import chosen
from pzasync.remote.address import is_remote_id
from pzasync.runtime.copies.local import LocalCopies, LocalEnvs
from pzasync.runtime.copies.protocol import Answer, EnvCopies, EnvCopiesFactory
from pzasync.runtime.copies.remote import RemoteCopies, RemoteEnvs
from pzasync.runtime.copies.workers import EnvWorkers, WorkerCopies

if TYPE_CHECKING:
    from pzasync.runtime.plan import RunPlan

__all__ = ["Answer", "EnvCopies", "EnvCopiesFactory", "EnvWorkers", "LocalCopies", "LocalEnvs", "RemoteCopies",
           "RemoteEnvs", "WorkerCopies", "copies_for"]


def copies_for(plan: RunPlan) -> EnvCopiesFactory:
    """An actor's env copies as its run plan asks: `envs_per_actor` copies, served by remote env servers when
    the env id names them (unix://, tcp://, cmd:; env workers would add nothing: the servers step the envs),
    else stepped by `env_workers` worker processes, or in the actor's process when there are none; through the
    env's parallel API where the plan chose the parallel path (`RunPlan.env_api`)."""
    cfg = plan.config
    parallel = plan.env_api == "parallel"
    if is_remote_id(plan.env_spec.source):
        return RemoteEnvs(plan.env_spec, plan.envs_per_actor, cfg.heartbeat_timeout_s, parallel=parallel)
    workers = chosen(cfg.env_workers, "env_workers")
    if workers:
        return EnvWorkers(plan.env_spec, plan.envs_per_actor, workers, cfg.heartbeat_timeout_s, run_id=plan.run_id,
                          parallel=parallel)
    make = plan.env_spec.make_parallel if parallel else plan.env_spec.make
    return LocalEnvs([make() for _ in range(plan.envs_per_actor)], plan.env_spec.name, parallel=parallel)
