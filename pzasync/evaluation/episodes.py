"""Evaluation episodes played in parallel over env copies, with one batched forward per policy and round.

`play_parallel` steps `copies` env copies, each an `EpisodeStepper` (core/stepper.py, the AEC loop every actor
uses), in rounds: every copy waiting on a decision is answered in the round, the decisions of one player
answered by one call (one forward of a policy over the rows of every copy and agent it plays). Episode `e`
(0, 1, ...) is reset with `seed + e` whichever copy plays it, and every player that draws at random is
reseeded for it from (`seed`, `e`, the agent), so an episode's play depends on its index alone: the same seed
gives the same results whatever the number of copies (a network's forwards take `FORWARD_ROWS` rows, padded,
so that float rounding, which depends on a batch's size, cannot tell the copies apart).

Players (`Player`): `PolicyPlayer`, one policy shared by every copy (a trained, untrained or another run's
network, batched: greedy, or sampling its own action distribution with a generator per decision; a recurrent
one's memory kept per (copy, agent) and zeroed at each episode start),
`PerCopyPlayer`, a never-learning player built once per copy and reseeded per episode (scripted players draw
their ties from their own RNG), and `RandomPlayer`, uniform over legal actions from a per-episode RNG.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Protocol

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

from pzasync.core.environments import EnvSpec, choose_env_api
from pzasync.core.parallel_stepper import ParallelStepper
from pzasync.core.spaces import (
    AgentLayout,
    env_action_converter,
    env_layouts,
    probe_info_masks,
    stack_masks,
    uniform_legal,
)
from pzasync.core.stepper import CopyStepper, EpisodeStepper, PendingDecision
from pzasync.core.transitions import EpisodeSummary, LayoutBook
from pzasync.recipes import env_api_for

#: Env copies evaluation steps side by side unless told otherwise: as many forwards saved per round as the
#: actor's measured default for self-play (config.AUTO_ENVS_PER_ACTOR).
EVAL_COPIES = 8


#: Rows of every forward of an evaluated policy: a round's decisions are padded to a multiple of it, so that each
#: row's output is the same bits whatever the copies beside it (a network's float rounding depends on the batch's
#: size, not on the other rows). As many as `EVAL_COPIES`: one copy's decision each, nothing padded by default.
FORWARD_ROWS = EVAL_COPIES

#: Decisions a round of parallel-path evaluation aims at (`eval_copies`): copies side by side until their cycles
#: hold about this many agents.
EVAL_ROWS = 64


#: How evaluated policies pick their actions: "greedy" (the most likely action; a Box action's mean) or "sampled"
#: (drawn from the policy's own distribution, as it acts in training: PPO samples, DQN explores epsilon-greedily).
ACTING_MODES = ("greedy", "sampled")


def episode_seed(seed: int, episode: int, agent_index: int) -> int:
    """The seed of one agent's player in one episode: independent streams per (seed, episode, agent)."""
    return int(np.random.SeedSequence([seed, episode, agent_index]).generate_state(1)[0])


def turn_seed(seed: int, episode: int, turn: int) -> int:
    """The seed of a sampling policy's draw at one turn of one episode (a stream apart from `episode_seed`'s)."""
    return int(np.random.SeedSequence([seed, episode, turn, 1]).generate_state(1)[0])


class Player(Protocol):
    """Plays one or more agents' seats in every copy: told when an episode starts, asked for actions."""

    def start(self, copy: int, episode: int, seed: int) -> None:
        """Episode `episode` starts in `copy`; `seed` is the run's evaluation seed."""

    def act(self, decisions: list[PendingDecision]) -> list[Any]:
        """Actions for pending decisions of any copies and of the agents this player plays, in order."""


def _masks(decisions: list[PendingDecision]) -> np.ndarray | None:
    if decisions[0].mask is None:
        return None
    return stack_masks([d.mask for d in decisions])


class PolicyPlayer:
    """A `pzasync.Policy` shared by every copy, one batched forward per round: greedy; or `explore`, sampling
    its own distribution, each decision drawn as if the policy were reseeded from (seed, episode, turn) and asked
    for it alone (`Policy.act_seeded`), so that a sampled episode, like a greedy one, depends on its index alone
    and not on the copies beside it.

    `forward_rows`: the rows of every forward, a round's decisions padded to them (`FORWARD_ROWS`); None asks
    for all of a round's decisions in one forward unpadded, for a player that only ever gets one row a call."""

    def __init__(self, policy: Any, layout: AgentLayout, explore: bool = False,
                 forward_rows: int | None = FORWARD_ROWS) -> None:
        self.policy, self.layout, self.explore = policy, layout, explore
        self.forward_rows = forward_rows
        #: A recurrent policy's memory per (copy, agent), from its last decision in the copy's episode.
        self.memory: dict[tuple[int, str], np.ndarray] = {}
        #: Per copy: (the evaluation's seed, the episode it plays, turns this player has answered in it).
        self.turns: dict[int, list[int]] = {}

    def start(self, copy: int, episode: int, seed: int) -> None:
        for key in [key for key in self.memory if key[0] == copy]:
            del self.memory[key]
        self.turns[copy] = [seed, episode, 0]

    def act(self, decisions: list[PendingDecision]) -> list[Any]:
        seeds = None
        if self.explore:
            seeds = []
            for d in decisions:
                seed, episode, turn = self.turns[d.copy]
                self.turns[d.copy][2] += 1
                seeds.append(turn_seed(seed, episode, turn))
        size = self.policy.memory_size
        rows = self.forward_rows or len(decisions)
        actions: list[Any] = []
        for first in range(0, len(decisions), rows):
            chunk = decisions[first:first + rows]
            # Padded to `rows` rows (copies of the first): a network's output for a row then depends on that
            # row alone, bit for bit, not on how many rows came with it (docs/league.md, "Episodes in parallel,
            # deterministic for a seed").
            padding = rows - len(chunk)
            padded = chunk + [chunk[0]] * padding
            obs, masks = self.layout.batch([d.obs for d in padded]), _masks(padded)
            memory = None
            if size:
                memory = np.zeros((rows, size), np.float32)
                for j, d in enumerate(chunk):
                    carried = self.memory.get((d.copy, d.agent))
                    if carried is not None:
                        memory[j] = carried
            if seeds is not None:
                row_seeds = seeds[first:first + len(chunk)] + [0] * padding
                out, after = self.policy.act_seeded(obs, masks, row_seeds, memory)
            elif memory is None:
                out, _ = self.policy.act(obs, masks, False)
            else:
                out, _, after = self.policy.act_with_memory(obs, masks, False, memory)
            if memory is not None:
                for j, d in enumerate(chunk):
                    self.memory[(d.copy, d.agent)] = after[j]
            actions += list(out[:len(chunk)])
        return actions


class PerCopyPlayer:
    """A never-learning player (`build()` -> a `Policy`, e.g. a scripted one) with one instance per copy,
    reseeded at every episode start, so its random choices depend on the episode, not on the copy."""

    def __init__(self, build: Callable[[], Any], layout: AgentLayout, agent_index: int) -> None:
        self.build, self.layout, self.agent_index = build, layout, agent_index
        self.players: dict[int, PolicyPlayer] = {}

    def start(self, copy: int, episode: int, seed: int) -> None:
        player = self.players.get(copy)
        if player is None:
            # One decision per copy and round, so every forward is one row: nothing to pad.
            player = self.players[copy] = PolicyPlayer(self.build(), self.layout, forward_rows=None)
        player.policy.seed(episode_seed(seed, episode, self.agent_index))
        player.start(copy, episode, seed)

    def act(self, decisions: list[PendingDecision]) -> list[Any]:
        by_copy: dict[int, list[int]] = {}
        for j, d in enumerate(decisions):
            by_copy.setdefault(d.copy, []).append(j)
        actions: list[Any] = [None] * len(decisions)
        for copy, rows in by_copy.items():
            for j, action in zip(rows, self.players[copy].act([decisions[j] for j in rows])):
                actions[j] = action
        return actions


class RandomPlayer:
    """Uniform over legal actions (mask entry i is action `start + i` of a Discrete space), else a sample of the
    action space, from an RNG per (copy, agent) seeded at each episode start."""

    def __init__(self, action_spaces: dict[str, Any], agent_index: dict[str, int]) -> None:
        self.spaces, self.agent_index = action_spaces, agent_index
        self.rngs: dict[tuple[int, str], np.random.Generator] = {}
        self.episode_of: dict[int, int] = {}
        self.seed = 0

    def start(self, copy: int, episode: int, seed: int) -> None:
        self.episode_of[copy], self.seed = episode, seed
        for key in [key for key in self.rngs if key[0] == copy]:
            del self.rngs[key]

    def act(self, decisions: list[PendingDecision]) -> list[Any]:
        out = []
        for d in decisions:
            rng = self.rngs.get((d.copy, d.agent))
            if rng is None:
                rng = self.rngs[(d.copy, d.agent)] = np.random.default_rng(
                    episode_seed(self.seed, self.episode_of[d.copy], self.agent_index[d.agent]))
            space = self.spaces[d.agent]
            if d.mask is not None and d.mask.any():
                start = int(space.start) if isinstance(space, spaces.Discrete) else 0
                out.append(uniform_legal(rng, d.mask) + start)
            elif isinstance(space, spaces.Discrete):  # drawn directly: reseeding the space costs 10x the draw
                out.append(int(space.start) + int(rng.integers(space.n)))
            else:
                space.seed(int(rng.integers(2**31)))
                out.append(space.sample())
        return out


def eval_copies(agents: int, env_api: str) -> int:
    """Env copies an evaluation steps side by side by default: `EVAL_COPIES` turn-based copies (one decision each a
    round); on the parallel path as many as keep a round near `EVAL_ROWS` decisions (a 162-agent env: one copy,
    whose every cycle is already one wide forward per policy, and whose games are long)."""
    if env_api != "parallel":
        return EVAL_COPIES
    return max(1, min(EVAL_COPIES, EVAL_ROWS // max(1, agents)))


def play_parallel(env_spec: Any, players: dict[str, Player], episodes: int, seed: int,
                  copies: int | None = None, max_episode_steps: int | None = None, env_api: str = "auto",
                  deadline: float | None = None) -> list[EpisodeSummary]:
    """Play `episodes` episodes over up to `copies` env copies (None: `eval_copies`), agent `a` played by
    `players[a]`; return their summaries in episode order (module docstring: seeding and batching).

    `env_api` ("auto", "aec", "parallel": `choose_env_api`): on the parallel path each round answers every live
    agent's decision of a cycle of every copy. `deadline` (a `time.monotonic()` instant): no episode starts after
    it; those in play finish, so the summaries are those of episodes 0, 1, ... k-1, k at least the first round's
    (one episode a copy)."""
    spec = env_spec if isinstance(env_spec, EnvSpec) else EnvSpec.of(env_spec)
    if episodes < 1:
        return []
    api, _why = choose_env_api(spec, env_api, declared=env_api_for(spec.base_name))
    make = spec.make_parallel if api == "parallel" else spec.make
    first = make()
    envs = [first]
    try:
        layouts = env_layouts(*_probe(first, seed))
        if copies is None:
            copies = eval_copies(len(first.possible_agents), api)
        envs += [make() for _ in range(max(1, min(copies, episodes)) - 1)]
        to_env = env_action_converter(layouts)
        done: dict[int, EpisodeSummary] = {}
        playing: dict[int, int] = {}  # copy -> episode index
        unique = list({id(p): p for p in players.values()}.values())
        if api == "parallel":
            for player in unique:
                if isinstance(player, PolicyPlayer) and player.forward_rows is not None:
                    seats = sum(p is player for p in players.values())
                    # Fixed by the seats a player fills in one cycle, never by the copies: still the same bits.
                    player.forward_rows = FORWARD_ROWS * -(-seats // FORWARD_ROWS)
        stepper_class: Any = ParallelStepper if api == "parallel" else EpisodeStepper
        steppers: list[CopyStepper] = [
            stepper_class(env, lambda t: None, copy=k, layouts=LayoutBook(env, layouts, fixed=True),
                          max_episode_steps=max_episode_steps, to_env=to_env,
                          on_episode=lambda s: done.__setitem__(playing[s.copy], s))
            for k, env in enumerate(envs)]
        started = 0

        def next_decisions(stepper: CopyStepper) -> list[PendingDecision]:
            nonlocal started
            while True:
                if not stepper.in_episode:
                    late = deadline is not None and started >= len(steppers) and time.monotonic() > deadline
                    if started >= episodes or late:
                        return []
                    playing[stepper.copy] = started
                    stepper.reset(seed=seed + started)
                    for player in unique:
                        player.start(stepper.copy, started, seed)
                    started += 1
                decisions = stepper.next_decisions()
                if decisions:
                    return decisions

        pending = [d for s in steppers for d in next_decisions(s)]
        while pending:
            rows: dict[int, list[int]] = {}
            for j, d in enumerate(pending):
                rows.setdefault(id(players[d.agent]), []).append(j)
            actions: list[Any] = [None] * len(pending)
            for indices in rows.values():
                player = players[pending[indices[0]].agent]
                for j, action in zip(indices, player.act([pending[j] for j in indices])):
                    actions[j] = action
            by_copy: dict[int, list[tuple[PendingDecision, Any, dict]]] = {}
            for d, action in zip(pending, actions):
                by_copy.setdefault(d.copy, []).append((d, action, {}))
            pending = []
            for copy, answered in by_copy.items():
                stepper = steppers[copy]
                stepper.answer(answered)
                pending += next_decisions(stepper)
        return [done[e] for e in range(started)]
    finally:
        for env in envs:
            env.close()


def _probe(env: Any, seed: int) -> tuple[Any, set[str]]:
    """(an AEC view of `env`, its info masks) for `env_layouts`: layouts are read the same way on either path."""
    if isinstance(env, ParallelEnv):
        from pettingzoo.utils.conversions import parallel_to_aec

        view = parallel_to_aec(env)
        return view, probe_info_masks(view, seed=seed)
    return env, probe_info_masks(env, seed=seed)
