"""Several actor processes (RunConfig.actors): actor 0 runs in the runner's process, actors 1..M-1 here.

Each extra actor is a process of its own (runtime/processes.py) that rebuilds its own env copies and policy
copies from the run's plan, says it is ready and waits for the runner's go, so that every actor starts acting
at once (an actor that started late would act alone at the end, skewing the budget split and every rate measured).
It reads the same policy slots as every other actor and writes its own buffer shard per learning unit
(transport/shards.py), so every buffer keeps one writer. It counts its steps and episodes in its own words of the
run's counters (transport/stats.py) and sends its finished episodes to the runner in batches, for the returns, the
episode log and the live display. The runner's monitor polls the pool with the learner host.

Stopping: the run's stop flag (a time budget, Ctrl-C, SIGTERM, a failure) stops every actor at its next
decision; an agent-step budget is split between the actors up front. An actor whose env raises sends the
error and its traceback; the runner stops the run and raises it again as `EnvCrashedError` (and as the
env's own exception type). An actor process that dies is reported with its exit code. If the runner's
process dies, each actor notices within a second, unlinks the run's shared memory and exits.
"""

from __future__ import annotations

import dataclasses
import os
import time
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from pzasync.errors import EnvCrashedError, PzasyncError, error_type_path, remote_error, report_unclean_exit
from pzasync.logs import logger
from pzasync.runtime.actor import acting_agents, build_actor
from pzasync.runtime.processes import process_context, runner_is_gone
from pzasync.runtime.results import process_usage
from pzasync.runtime.stop_signals import ignore_stop_signals, shielded
from pzasync.transport.shm import unlink_run

if TYPE_CHECKING:
    from pzasync.runtime.monitor import RunMonitor
    from pzasync.runtime.plan import RunPlan


def split_budget(agent_steps: int | None, actors: int) -> list[int | None]:
    """Each actor's share of an agent-step budget (they add up to it exactly)."""
    if agent_steps is None:
        return [None] * actors
    return [agent_steps // actors + (1 if k < agent_steps % actors else 0) for k in range(actors)]


@dataclass
class ActorSetup:
    """What an actor process needs, picklable (the plan's shared memory attaches on unpickling)."""

    index: int
    plan: RunPlan
    agent_steps: int | None
    paced: bool
    parent_pid: int
    resumed_steps: dict[str, int] = dataclasses.field(default_factory=dict)
    send_every_s: float = 0.25
    #: A restarted actor (backends/ray/actors.py): what its earlier lives counted, `{"total", "episodes",
    #: "steps": {agent: n}}`, from which its counters go on (its budget is what they left).
    carried: dict[str, Any] | None = None
    #: Send `ActorProgress` with each batch of episodes (a Ray actor's pool counts what a dead actor wrote).
    progress: bool = False

    def orphaned(self) -> bool:
        """Whether the runner's process is gone (this process was adopted by another)."""
        return runner_is_gone(self.parent_pid)


@dataclass
class ActorReady:
    """An actor has built its env copies and policies and waits for the runner's go."""

    index: int


@dataclass
class ActorProgress:
    """An actor's transitions written so far, per agent (sent with its episodes): what a pool knows of an
    actor that dies before its `ActorDone`."""

    index: int
    written: dict[str, int]


@dataclass
class ActorDone:
    """An actor's closing figures: transitions written and non-finite ones per agent, CPU and memory."""

    index: int
    written: dict[str, int]
    nonfinite: dict[str, int]
    cpu_seconds: float
    peak_rss_mb: float
    #: Its counter words at the end (`RunStats.actor_words` and `actor_agent` rows), for a pool that mirrors them.
    counters: tuple[list, list] | None = None


@dataclass
class ActorFailed:
    index: int
    error_type: str
    message: str
    traceback: str


class Outbox(Protocol):
    """Where an actor sends its messages: a pipe's end (an actor process), or a queue in a Ray actor."""

    def send(self, message: Any, /) -> None: ...

    def close(self) -> None: ...


def actor_process_main(setup: ActorSetup, conn: Outbox) -> None:
    """Body of actor process `setup.index` (or of a Ray actor, backends/ray/sampling.py): build, wait for the
    runner's go (a word of the run's counters), act until its budget or the run's stop flag, then report."""
    ignore_stop_signals()  # SIGTERM and Ctrl-C are the runner's; it stops us with the stop flag

    import torch

    plan, k = setup.plan, setup.index
    torch.set_num_threads(plan.config.torch_threads or 1)
    stats = plan.counters().for_actor(k)
    episodes: list[Any] = []
    clock = {"send": time.monotonic() + setup.send_every_s}
    calls = {"n": 0}
    orphaned = {"yes": False}

    def keep_going() -> bool:
        calls["n"] += 1
        if calls["n"] & 31:
            return not stats.stop_requested
        now = time.monotonic()
        if now >= clock["send"]:
            clock["send"] = now + setup.send_every_s
            stats.beat()
            if setup.orphaned():
                orphaned["yes"] = True
                return False
            if episodes:
                conn.send(list(episodes))
                episodes.clear()
            if setup.progress:
                conn.send(ActorProgress(k, {a: x.count.written for a, x in acting.items()}))
        return not stats.stop_requested

    actor = None
    cpu_at_start = process_usage()[0]
    try:
        acting = acting_agents(plan, k, setup.resumed_steps)
        actor = build_actor(plan, acting, stats, paced=setup.paced, actor=k)
        if setup.carried is not None:
            carry_on(actor, setup.carried)
        actor.prepare(seed=plan.config.seed + k * plan.envs_per_actor, on_episode=episodes.append)
        stats.beat()
        conn.send(ActorReady(k))
        checked = time.monotonic()
        while not stats.go and not stats.stop_requested:
            time.sleep(0.001)
            if time.monotonic() - checked > 0.5:
                checked = time.monotonic()
                if setup.orphaned():
                    orphaned["yes"] = True
                    break
        if orphaned["yes"]:
            unlink_run(plan.run_id, setup.parent_pid)
            return
        stats.beat()
        actor.run(agent_steps=setup.agent_steps, seed=plan.config.seed + k * plan.envs_per_actor,
                  keep_going=keep_going, on_episode=episodes.append)
        if orphaned["yes"]:
            unlink_run(plan.run_id, setup.parent_pid)
            return
        if episodes:
            conn.send(list(episodes))
        cpu, rss = process_usage()
        conn.send(ActorDone(k, {a: x.count.written for a, x in acting.items()},
                            {a: x.count.nonfinite for a, x in acting.items()}, cpu - cpu_at_start, rss,
                            (stats.actor_words[k].tolist(), stats.actor_agent[k].tolist())))
    except BaseException as exc:  # noqa: BLE001 - everything is reported to the runner, which decides
        if setup.orphaned():
            unlink_run(plan.run_id, setup.parent_pid)
            return
        cause = exc.__cause__ if isinstance(exc, EnvCrashedError) and exc.__cause__ is not None else exc
        try:
            conn.send(ActorFailed(k, error_type_path(type(cause)), str(exc), traceback.format_exc()))
        except (BrokenPipeError, OSError):
            pass
    finally:
        if actor is not None:
            actor.close()
        conn.close()


def carry_on(actor: Any, carried: dict[str, Any]) -> None:
    """A restarted actor counts on from its earlier lives (`ActorSetup.carried`): the run's counters of its
    actor index keep growing, and exploration schedules go on where they were."""
    actor.total_steps = carried.get("total", 0)
    actor.episodes = carried.get("episodes", 0)
    for agent, a in actor.agents.items():
        a.count.steps = carried.get("steps", {}).get(agent, 0)
        a.count.offset = 0
        a.policy.on_actor_steps(a.count.steps)


class ActorPool:
    """The run's actor processes beyond actor 0: start, poll (episodes, failures, deaths), wait, stop."""

    def __init__(self, plan: RunPlan, budgets: list[int | None], paced: bool, resumed_steps: dict[str, int],
                 timeout_s: float, heartbeat_timeout_s: float | None = None) -> None:
        self.plan = plan
        self.timeout_s = timeout_s
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.ctx = process_context()
        #: Each actor's share of the agent-step budget (`split_budget`); actor 0, the runner's, takes budgets[0].
        self.budgets = budgets
        self.setups = [ActorSetup(k, plan, budgets[k], paced, os.getpid(), dict(resumed_steps))
                       for k in range(1, plan.actors)]
        self.processes: dict[int, Any] = {}
        self.conns: dict[int, Any] = {}
        #: Actors that have built everything and wait for the go (`start_acting`).
        self.ready: set[int] = set()
        #: Closing figures of the actors that finished.
        self.done: dict[int, ActorDone] = {}
        #: The error that ends the run (an actor's env raised, or an actor process died).
        self.fatal: PzasyncError | None = None
        self._warned_silent: set[int] = set()

    def start(self) -> None:
        for setup in self.setups:
            receiver, sender = self.ctx.Pipe(duplex=False)
            process = self.ctx.Process(target=actor_process_main, args=(setup, sender),
                                       name=f"pzasync-actor-{setup.index}")
            with shielded():
                process.start()
            sender.close()
            self.processes[setup.index], self.conns[setup.index] = process, receiver

    @property
    def running(self) -> bool:
        return any(k not in self.done and p.is_alive() for k, p in self.processes.items())

    def poll(self, monitor: RunMonitor) -> None:
        """Take the actors' episodes and closing figures; a failure or a death stops the run."""
        for k, conn in self.conns.items():
            process = self.processes[k]
            alive = process.is_alive()  # before draining: a dead actor's last messages are all in the pipe
            try:
                while conn.poll():
                    self._handle(k, conn.recv(), monitor)
            except (EOFError, OSError):
                pass
            if k not in self.done and self.fatal is None and not alive:
                self._fail(monitor, EnvCrashedError(
                    f"actor process {k} (pid {process.pid}) died (exit code {process.exitcode}) before it "
                    f"finished; its env copies' episodes in progress are lost"))
            self._check_beat(k)

    def start_acting(self, monitor: RunMonitor) -> None:
        """Wait until every actor process is ready (or one failed, or `timeout_s` passed), then let them all
        act: the caller's actor 0 starts at the same moment."""
        deadline, stats = time.monotonic() + self.timeout_s, self.plan.counters()
        try:
            while len(self.ready) < len(self.processes) and self.fatal is None and not stats.stop_requested:
                self.poll(monitor)
                if time.monotonic() > deadline:
                    late = sorted(set(self.processes) - self.ready)
                    self._fail(monitor, PzasyncError(
                        f"actor process(es) {late} did not finish building their env copies and policies within "
                        f"{self.timeout_s:g}s (RunConfig.process_timeout_s)"))
                    break
                if len(self.ready) < len(self.processes):
                    time.sleep(0.005)
        finally:
            stats.let_actors_go()

    def _handle(self, k: int, message: Any, monitor: RunMonitor) -> None:
        if isinstance(message, ActorReady):
            self.ready.add(k)
        elif isinstance(message, ActorDone):
            self.done[k] = message
        elif isinstance(message, ActorProgress):
            pass
        elif isinstance(message, ActorFailed):
            logger.error(f"actor {k} failed:\n{message.traceback}")
            self._fail(monitor, remote_error(EnvCrashedError, message.error_type, f"actor {k}: {message.message}",
                                             message.traceback))
            self.done[k] = ActorDone(k, {}, {}, 0.0, 0.0)
        else:
            for summary in message:
                monitor.episode(summary, actor=k)

    def _fail(self, monitor: RunMonitor, error: PzasyncError) -> None:
        if self.fatal is None:
            self.fatal = error
            monitor.request_stop(f"an actor failed: {error}")

    def _check_beat(self, k: int) -> None:
        timeout = self.heartbeat_timeout_s
        stats = self.plan.stats
        if not timeout or k in self.done or stats is None or k in self._warned_silent:
            return
        beat = stats.actor_beat(k)
        if beat and (time.monotonic_ns() - beat) / 1e9 > timeout:
            self._warned_silent.add(k)
            logger.warning(f"actor {k} has not stepped for {timeout:.0f}s (stuck in an env step?)")

    def wait(self, monitor: RunMonitor) -> None:
        """Poll until every actor has finished (its budget, or the run's stop flag)."""
        while self.running and self.fatal is None:
            if not monitor.tick():  # time budget, signals; the stop flag reaches the actors
                break
            self.poll(monitor)
            time.sleep(0.01)
        deadline = time.monotonic() + self.timeout_s
        while self.running and time.monotonic() < deadline:
            self.poll(monitor)
            time.sleep(0.01)
        self.poll(monitor)

    def stop(self, monitor: RunMonitor | None = None) -> None:
        """Ask every actor to stop, wait for them (killing those that do not answer) and close the pipes."""
        if self.plan.stats is not None:
            self.plan.stats.request_stop()
        deadline = time.monotonic() + self.timeout_s
        killed = set()
        for k, process in self.processes.items():
            while process.is_alive() and time.monotonic() < deadline:
                if monitor is not None:
                    self.poll(monitor)
                process.join(timeout=0.05)
            if process.is_alive():
                process.kill()
                killed.add(k)
                process.join(timeout=5)
        if monitor is not None:
            self.poll(monitor)
        for k, process in self.processes.items():
            # What an actor process owned itself (its env workers' observation slots) and could not remove
            # because it was killed.
            unlink_run(self.plan.run_id, process.pid)
            if k in self.done and k not in killed and self.fatal is None:
                report_unclean_exit(f"actor process {k}", process)
        for conn in self.conns.values():
            conn.close()
        self.conns = {}

    def written(self, agent: str) -> int:
        return sum(d.written.get(agent, 0) for d in self.done.values())

    def dropped(self, unit: str) -> int:
        """Transitions of `unit` lost on their way to its buffer shards (none here: actors write them directly)."""
        return 0

    def actor_figures(self) -> list[dict[str, Any]]:
        """Per actor: where it ran and what it did (`RunResult.actor_nodes`); empty for local processes."""
        return []

    def display_line(self) -> str | None:
        """A line under the live table about the actors (per node), or None."""
        return None

    def nonfinite(self, agent: str) -> int:
        return sum(d.nonfinite.get(agent, 0) for d in self.done.values())

    def figures(self) -> list[dict[str, Any]]:
        """CPU seconds and peak RSS of each actor process that finished (RunResult.actor_processes)."""
        return [{"actor": k, "cpu_seconds": d.cpu_seconds, "peak_rss_mb": d.peak_rss_mb}
                for k, d in sorted(self.done.items()) if d.peak_rss_mb]
