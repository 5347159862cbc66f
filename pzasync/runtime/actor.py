"""The actor: steps its env copies with each agent's latest published policy and writes transitions to buffers.

It owns `RunConfig.envs_per_actor` env copies, each driven by an `EpisodeStepper` (core/stepper.py, the AEC loop
`rollout` uses too), stepped here or by env workers (runtime/copies/workers.py). Each round it collects the copies'
pending decisions, groups them by acting policy (a learning unit's, shared by an agent group's members, or a
league opponent's), and answers each group with one batched forward (`Actor.decide`, the one decision path);
then the copies step. Before a unit's forward it compares the slot version with the version it holds and, only
when it changed, copies the new vector into its local policy. It never waits for a learner, except in the two
opt-in modes that say so in their metrics: a replay ratio (bounded lead) and on-policy backpressure.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence, cast

import numpy as np

from pzasync.core.parallel_columns import CycleBlock, Rows
from pzasync.core.stepper import PendingDecision
from pzasync.core.transitions import EpisodeSummary, Transition
from pzasync.errors import EnvCrashedError, NonFiniteError, PzasyncError
from pzasync.learners import Policy
from pzasync.runtime.acting import ActingAgent, ActorContext, AgentCounts, LocalPolicy
from pzasync.runtime.actor_columns import ColumnActing
from pzasync.runtime.copies import EnvCopies, copies_for
from pzasync.runtime.copies.protocol import Answer
from pzasync.runtime.learner_loop import target_updates, written_within_lead
from pzasync.transport import stats as S
from pzasync.transport.protocols import RunControl, TransitionSource, TransitionWriter

if TYPE_CHECKING:
    from pzasync.runtime.plan import RunPlan


class Actor(ColumnActing):
    """Runs episodes on its env copies, answering each round's decisions with batched forwards per policy."""

    def __init__(self, context: ActorContext) -> None:
        self.context = context
        self.factory = context.copies
        self.n_copies = self.factory.copies
        #: The copy stepped in this process, if any (read for messages).
        self.env = self.factory.env
        self.env_name = self.factory.env_name
        self.agents = context.agents
        self.stats = context.stats
        self.max_lead_updates = max(1, round((context.replay_ratio or 0) * context.max_lead))
        self.layouts = {a: x.layout for a, x in self.agents.items()}
        #: Per unit policy, the agents acting with it.
        self._sharing: dict[int, list[ActingAgent]] = {}
        for a in self.agents.values():
            self._sharing.setdefault(id(a.local), []).append(a)
            a.count.offset = a.count.steps  # steps taken before this run (a resumed run) are not this run's
        self._waits = {a.agent: self._may_wait(a) for a in self.agents.values()}
        stores_track = self.n_copies > 1 if context.stores_track is None else context.stores_track
        #: Per env copy, its first track (times a unit's members per copy): None where transitions carry none.
        self._track_base: list[int] | None = (
            [context.actor_index * self.n_copies + k for k in range(self.n_copies)] if stores_track else None)
        self.total_steps = 0
        self.episodes = 0
        #: The run's `League` (RunConfig.league, pzasync/league.py, a layer above), which draws each episode's
        #: opponents at its start.
        self.league: Any = None
        #: Per env copy: this episode's league match, and the seats it gives another policy (not recorded).
        self.matches: list[Any] = [None] * self.n_copies
        self.overrides: list[dict[str, Policy]] = [{} for _ in range(self.n_copies)]
        #: Recurrent policies' memory per (env copy, agent), from its last decision in this episode.
        self._memory: dict[tuple[int, str], np.ndarray] = {}
        #: Copies whose decision `align` held back last round (answered this round whatever their group).
        self._held: set[int] = set()
        #: (seed, on_episode, copies, whether in columns) made ready by `prepare` for the next `run`.
        self._prepared: tuple | None = None
        #: Transitions emitted since the last `flush`, and their buffer, by buffer; and under on-policy
        #: backpressure, the agent whose buffer must have room for them before they are written.
        self._emitted: dict[int, list[Transition]] = {}
        self._emitted_rows: dict[int, list[tuple[Rows, np.ndarray]]] = {}
        self._emitted_to: dict[int, TransitionWriter] = {}
        self._room_for: dict[int, ActingAgent] = {}
        #: In columns: per acting policy (`_sharing`'s key), the buffer all its agents write, if they write one.
        self._unit_buffer: dict[int, TransitionWriter | None] = {
            unit: members[0].buffer if all(m.buffer is members[0].buffer for m in members) else None
            for unit, members in self._sharing.items()}

    # ------------------------------------------------------------------------------------------ per round
    def _may_wait(self, a: ActingAgent) -> bool:
        if a.buffer is None:
            return False
        ctx = self.context
        return (ctx.backpressure and a.on_policy) or (ctx.replay_ratio is not None and not a.on_policy)

    def _wait_if_ahead(self, a: ActingAgent) -> None:
        """Opt-in waits: under a replay ratio (bounded lead) or on-policy backpressure. Time is reported."""
        buffer = a.buffer
        assert buffer is not None, "only agents with a buffer wait (`_may_wait`)"
        source: TransitionSource | TransitionWriter = a.pace or buffer
        if source.written < a.count.lead_checked_until:
            return
        stats, unit, ratio = self.stats, a.unit, self.context.replay_ratio
        if stats.get(unit, S.STATUS) == S.CRASHED:
            return

        def ahead() -> bool:
            if a.on_policy:
                return self.context.backpressure and buffer.unread >= buffer.capacity - self.n_copies
            if ratio is None:
                return False
            due = target_updates(ratio, source.written, a.learning_starts)
            return due - stats.get(unit, S.UPDATES) > self.max_lead_updates

        if not ahead():
            if not a.on_policy:  # updates never go back: until the buffer holds this many, ahead() stays False
                assert ratio is not None, "an off-policy agent waits only under a replay ratio (`_may_wait`)"
                a.count.lead_checked_until = written_within_lead(ratio, stats.get(unit, S.UPDATES),
                                                                 self.max_lead_updates, a.learning_starts)
            return
        start = time.monotonic_ns()
        while ahead() and not stats.stop_requested and stats.get(unit, S.STATUS) != S.CRASHED:
            time.sleep(0.0001)
        stats.add(unit, S.ACTOR_WAIT_NS, time.monotonic_ns() - start)

    def _acting_policy(self, d: PendingDecision) -> tuple[int, int]:
        """Which policy answers a decision (as `decide` groups them): (the seat's unit policy, 0) or (0, the
        league opponent's module)."""
        override = self.overrides[d.copy].get(d.agent)
        return (id(self.agents[d.agent].local), 0) if override is None else (0, id(override))

    def decide(self, pending: list[PendingDecision]) -> list[Answer]:
        """Each pending decision with its action and the extras to store: one batched forward per acting
        policy, i.e. per learning unit (an agent group's members share their policy module here), and per
        league opponent standing in for one."""
        groups: dict[tuple[int, int], tuple[Policy | None, list[int]]] = {}
        agents, overrides = self.agents, self.overrides
        for i, d in enumerate(pending):
            opponent = overrides[d.copy].get(d.agent) if overrides[d.copy] else None
            key = (id(agents[d.agent].local), 0) if opponent is None else (0, id(opponent))
            group = groups.get(key)
            if group is None:
                group = groups[key] = (opponent, [])
            group[1].append(i)
        out: list[Any] = [None] * len(pending)
        for opponent, rows in groups.values():
            self._answer([pending[i] for i in rows], rows, out, opponent)
        return [(d, action, extras) for d, (action, extras) in zip(pending, out)]

    def _answer(self, decisions: list[PendingDecision], rows: list[int], out: list, opponent: Policy | None) -> None:
        """One group's decisions, answered by one forward: of the seats' own unit policy (counted in their
        schedules, stored with the policy version, member index and track) or of a league opponent (counted in
        the run's steps only, storing nothing)."""
        agents = self.agents
        first = agents[decisions[0].agent]
        if opponent is None:
            seats = [first] if len(decisions) == 1 else list({d.agent: agents[d.agent] for d in decisions}.values())
            self._before_forward(first, seats)
        actions, extras = self._forward(opponent or first.policy, first, decisions)
        self.total_steps += len(decisions)
        if opponent is not None:
            self.stats.record_steps(None, 0, self.total_steps)
            for j, i in enumerate(rows):
                out[i] = (actions[j], {})
            return
        self._count_decisions(first, seats, [agents[d.agent] for d in decisions])
        version, track_of = first.local.version, self._track_base
        members = first.tracks // self.n_copies
        for j, (i, d) in enumerate(zip(rows, decisions)):
            member = agents[d.agent].member
            stored = {k: v[j] for k, v in extras.items()} if extras else {}
            stored["policy_version"] = version
            if member is not None:
                stored["member"] = member
            if track_of is not None:
                stored["track"] = track_of[d.copy] * members + (member or 0)
            out[i] = (actions[j], stored)

    def _before_forward(self, first: ActingAgent, seats: list[ActingAgent]) -> None:
        """Before a unit's forward: the sequential runner's learners for each seat, the opt-in waits, and the
        newest published policy into the unit's module."""
        before = self.context.before_decision
        for a in seats:
            if before is not None:
                before(a.agent)
            if self._waits[a.agent]:
                self._wait_if_ahead(a)
        first.local.refresh()

    def _count_decisions(self, first: ActingAgent, seats: list[ActingAgent], deciding: Iterable[ActingAgent]) -> None:
        """After a unit's forward: one decision for each of `deciding` (an agent once per copy it decided in),
        the policy's schedule (a group's: its members' mean) and each seat's count in the run's counters."""
        for a in deciding:
            a.count.steps += 1
        sharing = self._sharing[id(first.local)]
        first.policy.on_actor_steps(first.count.steps if len(sharing) == 1 else
                                    round(sum(m.count.steps for m in sharing) / len(sharing)))
        record, total = self.stats.record_steps, self.total_steps
        for a in seats:
            record(a.agent, a.count.steps - a.count.offset, total)

    def _forward(self, policy: Policy, first: ActingAgent,
                 decisions: list[PendingDecision]) -> tuple[np.ndarray, dict]:
        """One batched forward; a recurrent policy's rows get the memory their (env copy, agent) carried out of
        its last decision, zeros at the start of its episode (`_episode_start` forgets the copy's memories). The
        observations are checked for NaN and inf first, all rows at once (`_check_finite`)."""
        obs, mask = first.layout.batch([d.obs for d in decisions]), _masks(decisions)
        if first.float_keys:
            self._check_finite(obs, first.float_keys, decisions)
        if not policy.memory_size:
            return policy.act(obs, mask, True)
        memories = self._memory
        keys = [(d.copy, d.agent) for d in decisions]
        memory = np.zeros((len(keys), policy.memory_size), np.float32)
        for j, key in enumerate(keys):
            carried = memories.get(key)
            if carried is not None:
                memory[j] = carried
        actions, extras, after = policy.act_with_memory(obs, mask, True, memory)
        for j, key in enumerate(keys):
            memories[key] = after[j]
        return actions, extras

    def align(self, pending: list[PendingDecision]) -> tuple[list[PendingDecision], list[PendingDecision]]:
        """Split a round into the decisions answered now and those held back for one round.

        Copies drift out of phase (episodes end at different turns), so a round of N copies splits over the
        agents' policies into several small forwards. Answering only the largest group, plus any decision
        already held once, brings the held copies back in phase: in a two-player game the held copies and
        the answered ones are at the same seat next round. A held copy waits one round at most, so no agent
        starves; per copy nothing changes, since its env is not stepped while it waits."""
        groups: dict[tuple[int, int], list[PendingDecision]] = {}
        for d in pending:
            groups.setdefault(self._acting_policy(d), []).append(d)
        if len(groups) < 2:
            self._held = set()
            return pending, []
        largest = max(groups.values(), key=len)
        now: list[PendingDecision] = []
        held: list[PendingDecision] = []
        for decisions in groups.values():
            due = decisions is largest or any(d.copy in self._held for d in decisions)
            (now if due else held).extend(decisions)
        self._held = {d.copy for d in held}
        return now, held

    def _check_finite(self, obs: dict[str, np.ndarray], keys: tuple[str, ...],
                      decisions: Sequence[PendingDecision | str]) -> None:
        """Count (or raise, with RunConfig(nonfinite="raise")) each decision (or agent, in columns) whose
        observation holds NaN or inf, before any policy acts on it: every transition's observation is a
        decision's."""
        rows = len(decisions)
        bad = np.zeros(rows, bool)
        for key in keys:
            bad |= ~np.isfinite(obs[key].reshape(rows, -1)).all(axis=1)
        for i in np.flatnonzero(bad):
            decision = decisions[int(i)]
            self._nonfinite(decision if isinstance(decision, str) else decision.agent, "its observation")

    def _nonfinite(self, agent: str, what: str) -> None:
        self.agents[agent].count.nonfinite += 1
        if self.context.raise_on_nonfinite:
            raise NonFiniteError(f"agent {agent!r}: NaN or inf in a transition ({what}) after {self.total_steps} "
                                 f"agent steps; RunConfig(nonfinite='count') counts instead")

    def emit(self, t: Transition, copy: int = 0) -> None:
        """Take a completed transition: its reward (and a final observation, which no decision saw) is checked
        for NaN and inf, and it is written (to its unit's buffer, unless a league opponent played the seat) with
        the rest of its round (`flush`)."""
        a = self.agents[t.agent]
        if not math.isfinite(t.reward):
            self._nonfinite(t.agent, f"its reward, {t.reward!r}")
        elif a.float_keys and (t.terminated or t.truncated) and not _finite_leaves(a, t.next_obs):
            self._nonfinite(t.agent, "its final observation")
        buffer = a.buffer if a.buffer is not None and t.agent not in self.overrides[copy] else None
        if buffer is None:
            return
        rows = self._emitted.get(id(buffer))
        if rows is None:
            rows = self._emitted[id(buffer)] = []
            self._emitted_to[id(buffer)] = buffer
            if a.on_policy and self._waits[a.agent]:
                self._room_for[id(buffer)] = a
        rows.append(t)
        a.count.written += 1

    def flush(self) -> None:
        """Write the round's transitions, each buffer's in one `write_batch` (or `write_rows`, in columns); under
        on-policy backpressure, once the buffer has room for them (`_wait_for_room`)."""
        for key, rows in self._emitted.items():
            buffer = self._emitted_to[key]
            waiting = self._room_for.get(key)
            if waiting is not None:
                self._wait_for_room(waiting, buffer, len(rows))
            buffer.write_batch(rows)
        for key, parts in self._emitted_rows.items():
            buffer = self._emitted_to[key]
            waiting = self._room_for.get(key)
            if waiting is not None:
                self._wait_for_room(waiting, buffer, sum(len(columns["reward"]) for columns, _ in parts))
            for columns, follows in parts:  # part by part: joining them first would copy every observation again
                buffer.write_rows(columns, follows)
        self._emitted.clear()
        self._emitted_rows.clear()
        self._emitted_to.clear()
        self._room_for.clear()

    def _wait_for_room(self, a: ActingAgent, buffer: TransitionWriter, rows: int) -> None:
        """On-policy backpressure: wait until `rows` more fit beside the rows its learner has not read, so that none
        is overwritten. The wait before each decision (`_wait_if_ahead`) keeps a margin of one row per env copy,
        and a round can complete two of a trajectory's transitions (one at its decision, its terminal one after
        the step): this wait is the exact one. A round larger than the whole ring waits for it to be empty."""
        def room() -> bool:
            unread = buffer.unread
            return unread == 0 or unread + rows <= buffer.capacity

        if room():
            return
        stats, unit = self.stats, a.unit
        start = time.monotonic_ns()
        while not room() and not stats.stop_requested and stats.get(unit, S.STATUS) != S.CRASHED:
            time.sleep(0.0001)
        stats.add(unit, S.ACTOR_WAIT_NS, time.monotonic_ns() - start)

    # ------------------------------------------------------------------------------------------ the loop
    def run(
        self,
        *,
        agent_steps: int | None,
        seed: int | None,
        keep_going: Callable[[], bool],
        on_episode: Callable[[EpisodeSummary], None],
    ) -> int:
        """Play until `agent_steps` decisions or until `keep_going()` is False; returns decisions taken.

        Copy k's first reset gets `seed + k`. A budget takes effect at each copy's next live decision, a stop
        at the next one after the round being answered (`keep_going` is asked once a round, before its env
        steps): every copy still in an episode is cut there (docs/transitions.md, rule 5)."""
        start_steps = self.total_steps

        def out_of_budget() -> bool:
            return (agent_steps is not None and self.total_steps - start_steps >= agent_steps) or not keep_going()

        prepared = self._prepared
        if prepared is not None and prepared[0] == seed and prepared[1] == on_episode:  # bound methods: ==
            self._prepared, copies, columns = None, prepared[2], prepared[3]
        else:
            self._drop_prepared()
            columns = self._column_sink() is not None
            copies = self._copies(seed, lambda summary: self._episode_done(summary, on_episode))
        # In columns, every pending decision is a copy's `CycleBlock`.
        # Copies that may be answered in part are brought into phase (`align`); env workers step a group while
        # the actor answers another, and a worker's group is answered whole.
        aligning = copies.holds_back and self.n_copies > 1
        self._held = set()
        try:
            # Rounds per group of copies (all of them in this process; one worker's with env workers, so the
            # actor answers one worker while the others step).
            going = not out_of_budget()
            copies.start(going)
            while (ready := copies.next_ready()) is not None:
                self.flush()
                group, pending = ready
                if not pending:
                    continue  # every copy of the group is between episodes and may not start one: it is done
                cut: list[int] = []
                if not going:
                    cut, pending = list(dict.fromkeys(d.copy for d in pending)), []
                elif agent_steps is not None:  # a round never takes more decisions than the budget has left
                    left = agent_steps - (self.total_steps - start_steps)
                    if left < (sum(block.size for block in pending) if columns else len(pending)):
                        pending, cut = _within_budget(pending, left)
                pending, held = self.align(pending) if aligning and pending else (pending, [])
                answered = ((self.decide_blocks(cast(list[CycleBlock], pending)) if columns else self.decide(pending))
                            if pending else [])
                going = not out_of_budget()
                copies.submit(group, answered, cut, going, held)
            copies.finish()
            self.flush()
            return self.total_steps - start_steps
        except (PzasyncError, KeyboardInterrupt):
            self.flush()  # what was completed before the error is kept (a remote failure's cut copies included)
            raise
        except Exception as exc:
            self.flush()
            copy, agent, episode = copies.failure_context()
            where = f" (env copy {copy})" if self.n_copies > 1 else ""
            raise EnvCrashedError(
                f"env {self.env_name!r}{where} raised {type(exc).__name__}: {exc} during the turn of agent "
                f"{agent!r}, in episode {episode} (from 0){' of that copy' if where else ''}, "
                f"at agent step {self.total_steps} of this run (original traceback above)"
            ) from exc
        finally:
            copies.close()

    def prepare(self, *, seed: int | None, on_episode: Callable[[EpisodeSummary], None]) -> None:
        """Get the env copies ready before acting starts: with env workers, spawn them and build their envs,
        which is start-up, not acting time. The next `run` with the same `seed` and `on_episode` uses them
        (`close` stops them if no run does)."""
        columns = self._column_sink() is not None
        self._prepared = (seed, on_episode, self._copies(seed, lambda summary: self._episode_done(summary, on_episode)),
                          columns)

    def _drop_prepared(self) -> None:
        """Forget copies `prepare` made and no run used, stopping their env workers."""
        prepared, self._prepared = self._prepared, None
        if prepared is not None:
            prepared[2].close()

    def _copies(self, seed: int | None, episode_done: Callable[[EpisodeSummary], None]) -> EnvCopies:
        """The env copies for one `run` (copies/protocol.py: in this process, or in env workers); parallel copies
        in this process are stepped in columns where that applies (`_column_sink`)."""
        ctx = self.context
        return self.factory.open(seed, self.layouts, emit=self.emit, on_episode=episode_done,
                                 on_start=self._episode_start, check_rewards=ctx.check_rewards,
                                 max_episode_steps=ctx.max_episode_steps, columns=self._column_sink())

    def close(self) -> None:
        """Close the env copies this actor holds (and env workers prepared but never run)."""
        self._drop_prepared()
        self.factory.close()

    def _episode_start(self, copy: int) -> None:
        if self._memory:
            for key in [key for key in self._memory if key[0] == copy]:
                del self._memory[key]
        if self.league is not None:
            match = self.matches[copy] = self.league.start_episode(self.total_steps)
            self.overrides[copy] = match.overrides

    def _episode_done(self, summary: EpisodeSummary, on_episode: Callable[[EpisodeSummary], None]) -> None:
        self.episodes += 1
        self.stats.record_episodes(self.episodes)
        if self.league is not None and self.matches[summary.copy] is not None:
            summary.match = self.league.end_episode(summary, self.matches[summary.copy])
            self.matches[summary.copy] = None
            self.overrides[summary.copy] = {}
        on_episode(summary)


def acting_agents(plan: RunPlan, actor: int = 0, resumed_steps: dict[str, int] | None = None) -> dict[str, ActingAgent]:
    """Actor `actor`'s view of every agent of a `RunPlan`: a local policy copy (one per learning unit), its
    slot, the buffer shard it writes and its schedule. Actor 0's policies are seeded as a one-actor run's."""
    config, resumed_steps = plan.config, resumed_steps or {}
    seed = config.seed + 100_003 * actor
    policies: dict[str, LocalPolicy] = {}  # a group's members act with one module and one vector
    acting: dict[str, ActingAgent] = {}
    for agent, p in plan.agents.items():
        policy = policies.get(p.unit)
        if policy is None:
            module = p.build_policy(seed)
            if config.actor_device != "cpu":
                module = module.to(config.actor_device)
            policy = policies[p.unit] = LocalPolicy(module, p.slot)
        a = ActingAgent(agent, p.layout, policy, p.learns, p.learner_cls.on_policy, p.writer(actor),
                        p.options.get("learning_starts", p.options.get("batch_size", 64)), unit=p.unit,
                        member=p.member, tracks=plan.tracks(p.unit), pace=p.buffer if plan.actors > 1 else None,
                        count=AgentCounts(steps=resumed_steps.get(agent, 0)))
        policy.module.on_actor_steps(a.count.steps)
        acting[agent] = a
    return acting


def build_actor(plan: RunPlan, acting: dict[str, ActingAgent], stats: RunControl, *, paced: bool, actor: int = 0,
                before_decision: Callable[[str], None] | None = None) -> Actor:
    """Actor `actor` of a `RunPlan`, with its env copies (stepped in its process, or by env workers).
    `paced`: its learners run apart from it, so the opt-in waits (replay ratio, backpressure) apply."""
    cfg = plan.config
    return Actor(ActorContext(copies_for(plan), acting, stats, replay_ratio=cfg.replay_ratio if paced else None,
                              max_lead=cfg.max_actor_lead, backpressure=cfg.backpressure and paced,
                              check_rewards=cfg.check_rewards, max_episode_steps=cfg.max_episode_steps,
                              before_decision=before_decision, raise_on_nonfinite=cfg.nonfinite == "raise",
                              actor_index=actor, stores_track=plan.envs_per_actor * plan.actors > 1))


def _finite_leaves(a: ActingAgent, obs: Any) -> bool:
    """Whether an observation's floating leaves are all finite."""
    leaves = a.layout.leaves_of(obs)
    return all(np.isfinite(leaves[i]).all() for i in a.float_leaves)


def _within_budget(pending: list[PendingDecision], left: int) -> tuple[list[PendingDecision], list[int]]:
    """The decisions of the copies that fit in `left` decisions, copy by copy in order (a copy's decisions are
    answered together: one on the AEC path, a whole cycle on the parallel path), and the copies cut."""
    sizes: dict[int, int] = {}
    for d in pending:
        sizes[d.copy] = sizes.get(d.copy, 0) + (d.size if isinstance(d, CycleBlock) else 1)
    kept, cut = set(), []
    for copy, size in sizes.items():
        if size <= left:
            kept.add(copy)
            left -= size
        else:
            cut.append(copy)
    return [d for d in pending if d.copy in kept], cut


def _masks(decisions: list[PendingDecision]) -> np.ndarray | None:
    mask = decisions[0].mask
    if mask is None:
        return None
    return mask[None] if len(decisions) == 1 else np.array([d.mask for d in decisions])
