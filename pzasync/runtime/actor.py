"""The actor: steps its env copies with each agent's latest published policy and writes transitions to buffers.

It owns `RunConfig.envs_per_actor` env copies, each driven by an `EpisodeStepper` (core/stepper.py, the AEC loop
`rollout` uses too), stepped here or by env workers (runtime/copies/workers.py). Each round it collects the copies'
pending decisions, groups them by acting policy (an agent's, an agent group's shared by its members, or a
league opponent's), and answers each group with one batched forward; then the copies step. Before a
group's forward it compares the slot version with the version it holds and, only when it changed, copies
the new vector into its local policy. It never waits for a learner, except in the two opt-in modes
that say so in their metrics: a replay ratio (bounded lead) and on-policy backpressure.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from pzasync.transport import stats as S
from pzasync.errors import EnvCrashedError, NonFiniteError, PzasyncError
from pzasync.runtime.learner_loop import target_updates, written_within_lead
from pzasync.core.spaces import AgentLayout
from pzasync.transport.protocols import PolicySource, RunControl, TransitionWriter
from pzasync.runtime.copies import EnvCopies, EnvCopiesFactory, LocalEnvs, copies_for
from pzasync.runtime.copies.protocol import Answer
from pzasync.core.stepper import PendingDecision
from pzasync.core.transitions import EpisodeSummary, Transition
from pzasync.learners import vector_to_policy


@dataclass
class ActingAgent:
    """The actor's view of one agent: its local policy copy, slot, buffer and schedule."""

    agent: str
    layout: AgentLayout
    policy: Any
    learns: bool
    on_policy: bool = False
    slot: PolicySource | None = None
    buffer: TransitionWriter | None = None
    learning_starts: int = 0
    version: int = 0
    steps: int = 0
    vector: np.ndarray | None = None
    may_wait: bool = False
    #: Whether anything runs before this agent acts (a `before_decision` hook, or an opt-in wait).
    checks_first: bool = False
    nonfinite: int = 0
    #: Under a replay ratio: the unit's buffer may hold this many transitions before the lead bound needs asking.
    lead_checked_until: float = 0
    #: Indices of the observation leaves checked for NaN and inf (the floating ones).
    float_leaves: list[int] = field(default_factory=list)
    steps_offset: int = 0
    #: Whether the stored observation is one array (a batch of one is then a view, not a stack).
    flat_obs: bool = field(init=False, default=True)
    #: Whose learner counters apply (its own name, or its agent group's) and, in a group, its member index.
    unit: str = ""
    member: int | None = None
    #: Transitions this agent wrote (a group's buffer counts all members together).
    written: int = 0
    #: Trajectories interleaved in its unit's buffer (env copies x group members; RunPlan.tracks).
    tracks: int = 1
    #: With several actors: the unit's whole source (every actor's shard), whose `written` paces a replay
    #: ratio; `buffer` is this actor's own shard.
    pace: Any = None

    def __post_init__(self) -> None:
        self.unit = self.unit or self.agent
        if self.slot is not None:
            self.vector = np.zeros(self.slot.size, np.float32)
        self.float_leaves = [i for i, leaf in enumerate(self.layout.obs_leaves) if leaf.dtype.kind == "f"]
        self.flat_obs = not self.layout.nested_obs


class Actor:
    """Runs episodes on its env copies, answering each round's decisions with batched forwards per agent."""

    def __init__(
        self,
        copies: EnvCopiesFactory | Any,
        agents: dict[str, ActingAgent],
        stats: RunControl,
        *,
        replay_ratio: float | None,
        max_lead: int,
        backpressure: bool,
        check_rewards: bool = True,
        max_episode_steps: int | None = None,
        before_decision: Callable[[str], None] | None = None,
        env_name: str | None = None,
        raise_on_nonfinite: bool = False,
        actor_index: int = 0,
        stores_track: bool | None = None,
    ) -> None:
        #: What the env copies are made from (copies/protocol.py); env instances are stepped here.
        self.factory: EnvCopiesFactory = copies if hasattr(copies, "open") else LocalEnvs(copies, env_name)
        self.n_copies = self.factory.copies
        #: The copy stepped in this process, if any (read for messages).
        self.env = self.factory.env
        self.env_name = env_name or self.factory.env_name
        self.raise_on_nonfinite = raise_on_nonfinite
        #: Which of the run's actors this is (RunConfig.actors): its tracks follow those of the actors before it.
        self.actor_index = actor_index
        #: Whether transitions carry `track` (several env copies, in this actor or across actors).
        self.stores_track = self.n_copies > 1 if stores_track is None else stores_track
        self.agents = agents
        self.stats = stats
        self.replay_ratio = replay_ratio
        self.max_lead_updates = max(1, int(round((replay_ratio or 0) * max_lead)))
        self.backpressure = backpressure
        self.check_rewards = check_rewards
        self.max_episode_steps = max_episode_steps
        self.before_decision = before_decision
        self._load = vector_to_policy
        self.layouts = {a: x.layout for a, x in agents.items()}
        #: Per agent, the key of its own policy module in a round's groups (`_acting_policy`).
        self._own_policy = {a: (id(x.policy), 0) for a, x in agents.items()}
        #: Policy module -> the agents acting with it (an agent group's members share one module and vector).
        self._sharing: dict[int, list[ActingAgent]] = {}
        for a in agents.values():
            self._sharing.setdefault(id(a.policy), []).append(a)
            a.may_wait = self._may_wait(a)
            a.checks_first = a.may_wait or before_decision is not None
            a.steps_offset = a.steps  # steps taken before this run (a resumed run) are not this run's
        #: Agents whose decisions, one at a time, need none of `_act_as_self`'s grouping (`_act_alone`): each acts
        #: with its own module, shared with no other agent, has no memory, no hook before deciding and stores
        #: only the policy version (no member index, no track).
        self._alone = {a.agent: a for a in agents.values()
                       if before_decision is None and not a.policy.memory_size and a.member is None
                       and not self.stores_track and len(self._sharing[id(a.policy)]) == 1}
        self.total_steps = 0
        self.episodes = 0
        #: The run's `League` (RunConfig.league), which draws each episode's opponents at its start.
        self.league: Any = None
        #: Per env copy: this episode's league match, and the seats it gives another policy (not recorded).
        self.matches: list[Any] = [None] * self.n_copies
        self.overrides: list[dict[str, Any]] = [{} for _ in range(self.n_copies)]
        #: Recurrent policies' memory per (env copy, agent), from its last decision in this episode.
        self._memory: dict[tuple[int, str], np.ndarray] = {}
        #: Copies whose decision `align` held back last round (answered this round whatever their group).
        self._held: set[int] = set()
        #: (seed, on_episode, copies) made ready by `prepare` for the next `run`.
        self._prepared: tuple | None = None
        #: Per env copy, its first track (times a unit's members per copy): None where transitions carry none.
        self._track_base: list[int] | None = (
            [self.actor_index * self.n_copies + k for k in range(self.n_copies)] if self.stores_track else None)

    # ------------------------------------------------------------------------------------------ per round
    def refresh(self, a: ActingAgent) -> None:
        """Copy the agent's newest published policy into its local module, if the version changed (for every
        agent sharing that module)."""
        if a.slot is not None and a.slot.version != a.version:
            version = a.slot.read(a.vector)
            self._load(a.vector, a.policy)
            for member in self._sharing[id(a.policy)]:
                member.version = version

    def _may_wait(self, a: ActingAgent) -> bool:
        if a.buffer is None:
            return False
        return (self.backpressure and a.on_policy) or (self.replay_ratio is not None and not a.on_policy)

    def _wait_if_ahead(self, a: ActingAgent) -> None:
        """Opt-in waits: under a replay ratio (bounded lead) or on-policy backpressure. Time is reported."""
        source = a.pace or a.buffer
        if source.written < a.lead_checked_until:
            return
        stats, agent = self.stats, a.unit
        if stats.get(agent, S.STATUS) == S.CRASHED:
            return
        def ahead() -> bool:
            if a.on_policy:
                return self.backpressure and a.buffer.unread >= a.buffer.capacity - self.n_copies
            if self.replay_ratio is None:
                return False
            due = target_updates(self.replay_ratio, (a.pace or a.buffer).written, a.learning_starts)
            return due - stats.get(agent, S.UPDATES) > self.max_lead_updates
        if not ahead():
            if not a.on_policy:  # updates never go back: until the buffer holds this many, ahead() stays False
                a.lead_checked_until = written_within_lead(self.replay_ratio, stats.get(agent, S.UPDATES),
                                                           self.max_lead_updates, a.learning_starts)
            return
        start = time.monotonic_ns()
        while ahead() and not stats.stop_requested and stats.get(agent, S.STATUS) != S.CRASHED:
            time.sleep(0.0001)
        stats.add(agent, S.ACTOR_WAIT_NS, time.monotonic_ns() - start)

    def decide(self, pending: list[PendingDecision]) -> list[Answer]:
        """Each pending decision with its action and the extras to store: one batched forward per acting
        policy, i.e. per learner unit (an agent group's members share their policy module here), and per
        league opponent standing in for one."""
        if len(pending) == 1:
            d = pending[0]
            alone = self._alone.get(d.agent)
            if alone is not None and not self.overrides[d.copy]:
                return [self._act_alone(alone, d)]
        out: list[Any] = [None] * len(pending)
        if len(pending) == 1 and not self.overrides[pending[0].copy]:
            self._act_as_self(pending, [0], out)  # one decision, the seat's own policy: no grouping to do
            return [(pending[0], *out[0])]
        groups: dict[tuple[int, int], list[int]] = {}
        for i, d in enumerate(pending):
            groups.setdefault(self._acting_policy(d), []).append(i)
        for (_own, opponent), rows in groups.items():
            decisions = [pending[i] for i in rows]
            if opponent:
                first = decisions[0]
                self._act_as_opponent(self.agents[first.agent], self.overrides[first.copy][first.agent], decisions,
                                      rows, out)
            else:
                self._act_as_self(decisions, rows, out)
        return [(d, action, extras) for d, (action, extras) in zip(pending, out)]

    def _act_alone(self, a: ActingAgent, d: PendingDecision) -> Answer:
        """One decision of an agent that acts alone with its own policy and stores nothing beyond the policy
        version (`_alone`): `_act_as_self` without its grouping, at every decision of one env copy."""
        if a.may_wait:
            self._wait_if_ahead(a)
        if a.slot is not None and a.slot.version != a.version:
            self.refresh(a)
        policy = a.policy
        obs = {"obs": d.obs[None]} if a.flat_obs else a.layout.batch([d.obs])
        actions, extras = policy.act(obs, None if d.mask is None else d.mask[None], True)
        a.steps = steps = a.steps + 1
        self.total_steps = total = self.total_steps + 1
        policy.on_actor_steps(steps)
        self.stats.record_steps(a.agent, steps - a.steps_offset, total)
        stored = {k: v[0] for k, v in extras.items()} if extras else {}
        stored["policy_version"] = a.version
        return d, actions[0], stored

    def _acting_policy(self, d: PendingDecision) -> tuple[int, int]:
        """Which policy answers a decision: (the seat's own module, 0) or (0, the league opponent's module)."""
        override = self.overrides[d.copy].get(d.agent)
        return self._own_policy[d.agent] if override is None else (0, id(override))

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

    def _act_as_self(self, decisions: list[PendingDecision], rows: list[int], out: list) -> None:
        """Decisions of agents that act with one policy module (an agent, or members of its group)."""
        agents = self.agents
        lead = agents[decisions[0].agent]
        n = len(decisions)
        alone = n == 1 or all(d.agent == lead.agent for d in decisions)
        acting: tuple[ActingAgent, ...] = (
            (lead,) if alone else tuple({d.agent: agents[d.agent] for d in decisions}.values()))
        for a in acting:
            if a.checks_first:
                if self.before_decision is not None:
                    self.before_decision(a.agent)
                if a.may_wait:
                    self._wait_if_ahead(a)
        if lead.slot is not None and lead.slot.version != lead.version:
            self.refresh(lead)
        policy = lead.policy
        if policy.memory_size:
            actions, extras = self._act_with_memory(policy, lead.layout, decisions)
        else:
            actions, extras = policy.act(lead.layout.batch([d.obs for d in decisions]), _masks(decisions), True)
        if alone:
            lead.steps += n
        else:
            for d in decisions:
                agents[d.agent].steps += 1
        self.total_steps += n
        sharing = self._sharing[id(policy)]
        policy.on_actor_steps(lead.steps if len(sharing) == 1 else
                              round(sum(m.steps for m in sharing) / len(sharing)))
        for a in acting:
            self.stats.record_steps(a.agent, a.steps - a.steps_offset, self.total_steps)
        version, track_of = lead.version, self._track_base
        if not extras and track_of is None and len(acting) == 1 and lead.member is None:
            for j, i in enumerate(rows):  # the usual case: nothing stored beyond the policy version
                out[i] = (actions[j], {"policy_version": version})
            return
        members = lead.tracks // self.n_copies
        for j, (i, d) in enumerate(zip(rows, decisions)):
            a = agents[d.agent]
            stored = {k: v[j] for k, v in extras.items()} if extras else {}
            stored["policy_version"] = version
            if a.member is not None:
                stored["member"] = a.member
            if track_of is not None:
                stored["track"] = track_of[d.copy] * members + (a.member or 0)
            out[i] = (actions[j], stored)

    def _act_as_opponent(self, a: ActingAgent, policy: Any, decisions: list[PendingDecision], rows: list[int],
                         out: list) -> None:
        """A league opponent's decisions: counted in the run's steps, not in the seat's own schedule."""
        if policy.memory_size:
            actions, _ = self._act_with_memory(policy, a.layout, decisions)
        else:
            actions, _ = policy.act(a.layout.batch([d.obs for d in decisions]), _masks(decisions), True)
        self.total_steps += len(decisions)
        self.stats.record_steps(None, 0, self.total_steps)
        for j, i in enumerate(rows):
            out[i] = (actions[j], {})

    def _act_with_memory(self, policy: Any, layout: AgentLayout, decisions: list[PendingDecision]) -> tuple[Any, dict]:
        """A recurrent policy's forward: each row gets the memory its (env copy, agent) carried out of its last
        decision, zeros at the start of its episode (`_episode_start` forgets the copy's memories)."""
        memories, size = self._memory, policy.memory_size
        keys = [(d.copy, d.agent) for d in decisions]
        memory = np.zeros((len(keys), size), np.float32)
        for j, key in enumerate(keys):
            carried = memories.get(key)
            if carried is not None:
                memory[j] = carried
        actions, extras, after = policy.act_with_memory(layout.batch([d.obs for d in decisions]), _masks(decisions),
                                                        True, memory)
        for j, key in enumerate(keys):
            memories[key] = after[j]
        return actions, extras

    def _finite(self, a: ActingAgent, t: Transition) -> bool:
        if not math.isfinite(t.reward):
            return False
        for obs in (t.obs, t.next_obs):
            if a.float_leaves:
                leaves = a.layout.leaves_of(obs)
                if not all(np.isfinite(leaves[i]).all() for i in a.float_leaves):
                    return False
        return True

    def emit(self, t: Transition, copy: int = 0) -> None:
        a = self.agents[t.agent]
        if not (math.isfinite(t.reward) if not a.float_leaves else self._finite(a, t)):
            a.nonfinite += 1
            if self.raise_on_nonfinite:
                raise NonFiniteError(f"agent {t.agent!r}: NaN or inf in a transition (reward {t.reward!r}) after "
                                     f"{self.total_steps} agent steps; RunConfig(nonfinite='count') counts instead")
        if a.buffer is not None and t.agent not in self.overrides[copy]:
            a.buffer.write(t)
            a.written += 1

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
            self._prepared, copies = None, prepared[2]
        else:
            self._drop_prepared()
            copies = self._copies(seed, lambda summary: self._episode_done(summary, on_episode))
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
                group, pending = ready
                if not pending:
                    continue  # every copy of the group is between episodes and may not start one: it is done
                cut: list[int] = []
                if not going:
                    cut, pending = [d.copy for d in pending], []
                elif agent_steps is not None:  # a round never takes more decisions than the budget has left
                    left = agent_steps - (self.total_steps - start_steps)
                    if left < len(pending):
                        cut, pending = [d.copy for d in pending[left:]], pending[:left]
                pending, held = self.align(pending) if aligning and pending else (pending, [])
                answered = self.decide(pending) if pending else []
                going = not out_of_budget()
                copies.submit(group, answered, cut, going, held)
            copies.finish()
            return self.total_steps - start_steps
        except (PzasyncError, KeyboardInterrupt):
            raise
        except Exception as exc:
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
        self._prepared = (seed, on_episode, self._copies(seed, lambda summary: self._episode_done(summary, on_episode)))

    def _drop_prepared(self) -> None:
        """Forget copies `prepare` made and no run used, stopping their env workers."""
        prepared, self._prepared = self._prepared, None
        if prepared is not None:
            prepared[2].close()

    def _copies(self, seed: int | None, episode_done: Callable[[EpisodeSummary], None]) -> EnvCopies:
        """The env copies for one `run` (copies/protocol.py: in this process, or in env workers)."""
        return self.factory.open(seed, self.layouts, emit=self.emit, on_episode=episode_done,
                                 on_start=self._episode_start, check_rewards=self.check_rewards,
                                 max_episode_steps=self.max_episode_steps)

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


def acting_agents(plan: Any, actor: int = 0, resumed_steps: dict[str, int] | None = None) -> dict[str, ActingAgent]:
    """Actor `actor`'s view of every agent of a `RunPlan`: a local policy copy (one per agent group), its
    slot, the buffer shard it writes and its schedule. Actor 0's policies are seeded as a one-actor run's."""
    config, resumed_steps = plan.config, resumed_steps or {}
    seed = config.seed + 100_003 * actor
    acting: dict[str, ActingAgent] = {}
    shared: dict[str, ActingAgent] = {}  # a group's members act with one module and one vector
    for agent, p in plan.agents.items():
        starts = int(p.options.get("learning_starts", p.options.get("batch_size", 64)))
        first = shared.get(p.unit) if p.unit != agent else None
        policy = first.policy if first is not None else p.build_policy(seed)
        if first is None and config.actor_device != "cpu" and hasattr(policy, "to"):
            policy = policy.to(config.actor_device)
        a = ActingAgent(agent, p.layout, policy, p.learns, p.learner_cls.on_policy, p.slot, p.writer(actor),
                        starts, steps=resumed_steps.get(agent, 0), unit=p.unit, member=p.member,
                        tracks=plan.tracks(p.unit), pace=p.buffer if plan.actors > 1 else None)
        if first is not None:
            a.vector = first.vector
        shared.setdefault(p.unit, a)
        a.policy.on_actor_steps(a.steps)
        acting[agent] = a
    return acting


def build_actor(plan: Any, acting: dict[str, ActingAgent], stats: RunControl, *, paced: bool, actor: int = 0,
                before_decision: Callable[[str], None] | None = None) -> Actor:
    """Actor `actor` of a `RunPlan`, with its env copies (stepped in its process, or by env workers).
    `paced`: its learners run apart from it, so the opt-in waits (replay ratio, backpressure) apply."""
    cfg = plan.config
    return Actor(copies_for(plan), acting, stats, replay_ratio=cfg.replay_ratio if paced else None,
                 max_lead=cfg.max_actor_lead, backpressure=cfg.backpressure and paced,
                 check_rewards=cfg.check_rewards, max_episode_steps=cfg.max_episode_steps,
                 before_decision=before_decision, env_name=plan.env_spec.name,
                 raise_on_nonfinite=cfg.nonfinite == "raise", actor_index=actor,
                 stores_track=plan.envs_per_actor * plan.actors > 1)


def _masks(decisions: list[PendingDecision]) -> np.ndarray | None:
    mask = decisions[0].mask
    if mask is None:
        return None
    return mask[None] if len(decisions) == 1 else np.array([d.mask for d in decisions])
