"""The env that plays an env set (envset_spec.py): at each `reset` it chooses which of the set's envs is active,
drawn from the split's weights with the members' drawn arguments (a prior), or the curriculum's current step, and
then forwards everything to that env. So the runtime steps it as any AEC or parallel env, in the actor's process,
in env workers or in the evaluator, and learners never know.

`EnvSetSource` is what an `EnvSpec` holds (a picklable factory, as `EnvSpec.source`): the set, the split and
where the curriculum's stage comes from (`stage`: None for stage 0, a number to pin one, or an object with a
`curriculum_stage` attribute, the run's counters in shared memory: every copy reads it at its reset).

Draws are seeded: a seeded reset seeds the copy's own stream (`default_rng([seed, SALT])`), later resets draw
from it, so each env copy (seeded `seed + k`) has its own reproducible stream; an env first made after that is
seeded from the same stream. Made envs are kept (at most KEEP per copy, least recently used closed first), so an
episode of an env seen before costs no construction.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from pettingzoo import AECEnv, ParallelEnv

from pzasync.core.environments import EnvSpec
from pzasync.core.envset_spec import EnvSet, Member, check_spaces
from pzasync.core.global_state import StateRequest
from pzasync.errors import EnvSpecError

#: Mixed into every copy's seed so the set's draws do not repeat the env's own random stream.
SALT = 0x5E75E7
#: Envs one copy keeps made (one per member and argument values), least recently used closed first.
KEEP = 8


@dataclass(frozen=True)
class EnvSetSource:
    """A factory of the env that plays `envset`'s `split` (module docstring); picklable, so env workers build it."""

    envset: EnvSet
    split: str = "train"
    stage: Any = None

    @property
    def env_name(self) -> str:
        """EnvSpec.name: the set's name, and the split where it is the test split."""
        return self.envset.name + ("" if self.split == "train" else f"[{self.split}]")

    @property
    def base_env(self) -> str:
        """The env id recipes, scoring and env APIs go by: the set's first env."""
        return self.envset.first.env

    def __call__(self, **kwargs: Any) -> AECEnv:
        _no_kwargs(self, kwargs)
        return EnvSetEnv(self)

    def make_parallel(self, **kwargs: Any) -> ParallelEnv:
        """The parallel API of every env of the set (EnvSpecError where one has none)."""
        _no_kwargs(self, kwargs)
        return EnvSetParallelEnv(self)

    def with_stage(self, stage: Any) -> EnvSetSource:
        """The same set with its stage read from `stage` (see the module docstring)."""
        return replace(self, stage=stage)

    def current_stage(self) -> int:
        if self.stage is None:
            return 0
        if isinstance(self.stage, (int, np.integer)):
            return int(self.stage)
        return int(self.stage.curriculum_stage)

    def pinned(self) -> EnvSetSource:
        """The set at the stage it is at now, held there (an evaluation round plays one stage)."""
        return replace(self, stage=self.current_stage())

    def check(self) -> None:
        """Every env of the set has the same agents and spaces (`check_spaces`), before any process starts."""
        check_spaces(self.envset, lambda member, args: member_spec(member).make(**args))

    def choose(self, rng: np.random.Generator) -> tuple[Member, dict[str, Any]]:
        """This episode's env and its arguments."""
        members = self.envset.members_at(self.split, self.current_stage())
        if len(members) == 1:
            member = members[0]
        else:
            weights = np.array([m.weight for m in members])
            member = members[int(rng.choice(len(members), p=weights / weights.sum()))]
        return member, member.draw(rng)


def member_spec(member: Member) -> EnvSpec:
    """The EnvSpec of one env of a set (its id and wrappers; its arguments are given at `make`)."""
    return EnvSpec.of(member.env, member.wrappers)


def _no_kwargs(source: EnvSetSource, kwargs: dict[str, Any]) -> None:
    if kwargs:
        raise EnvSpecError(f"env set {source.envset.name!r}: env arguments {sorted(kwargs)} belong in the set's "
                           f"tables (args = {{...}} of each env), not beside it")


class _Chooser:
    """What both APIs share: the copy's stream, the made envs, and which one is active."""

    def __init__(self, source: EnvSetSource, parallel: bool) -> None:
        self.source = source
        self.parallel = parallel
        self.rng = np.random.default_rng(SALT)
        self.made: OrderedDict[tuple, Any] = OrderedDict()
        member = source.envset.members_at(source.split, source.current_stage())[0]
        #: The env the episode plays, its member's label and its arguments (the first member's until a reset).
        self.active, _fresh = self._env(member, member.checked_args()[0])
        self.label: str = member.label
        self.args: dict[str, Any] = {}

    def _env(self, member: Member, args: dict[str, Any]) -> tuple[Any, bool]:
        key = (member.env, member.wrappers, repr(sorted(args.items())))
        env = self.made.get(key)
        if env is not None:
            self.made.move_to_end(key)
            return env, False
        spec = member_spec(member)
        env = spec.make_parallel(**args) if self.parallel else spec.make(**args)
        self.made[key] = env
        while len(self.made) > KEEP:
            _, old = self.made.popitem(last=False)
            if old is not self.active:
                old.close()
        return env, True

    def choose(self, seed: int | None) -> int | None:
        """Make this episode's env active; the seed to reset it with."""
        if seed is not None:
            self.rng = np.random.default_rng([seed, SALT])
        member, args = self.source.choose(self.rng)
        self.active, fresh = self._env(member, args)
        self.label, self.args = member.label, args
        if seed is None and fresh:  # an env made after the copy's seeded reset: seeded from the copy's stream
            seed = int(self.rng.integers(2**31))
        return seed

    def close(self) -> None:
        for env in self.made.values():
            env.close()
        self.made.clear()


class _ActiveEnv:
    """What both APIs' set envs forward to the env active this episode (`_Chooser.active`), and the set's own
    parts: its made envs, the episode's label and arguments."""

    _set: _Chooser

    def _start(self, source: EnvSetSource, parallel: bool) -> None:
        self._set = _Chooser(source, parallel=parallel)
        self.possible_agents = list(self._set.active.possible_agents)
        self.metadata = dict(getattr(self._set.active, "metadata", {}))
        self.render_mode = getattr(self._set.active, "render_mode", None)

    @property
    def episode_env(self) -> tuple[str, dict[str, Any]]:
        """The active env's label and arguments (episodes.jsonl, the live table)."""
        return self._set.label, self._set.args

    def observation_space(self, agent: str) -> Any:
        return self._set.active.observation_space(agent)

    def action_space(self, agent: str) -> Any:
        return self._set.active.action_space(agent)

    def state(self) -> np.ndarray:
        return self._set.active.state()

    def render(self) -> Any:
        return self._set.active.render()

    def close(self) -> None:
        self._set.close()

    agents = property(lambda self: self._set.active.agents)

    @property
    def state_space(self) -> Any:
        return self._set.active.state_space

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._set.active, name)


class EnvSetEnv(_ActiveEnv, AECEnv):
    """An AEC env that plays one of its set's envs per episode, chosen at `reset` (module docstring)."""

    def __init__(self, source: EnvSetSource) -> None:
        AECEnv.__init__(self)
        self._start(source, parallel=False)

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        seed = self._set.choose(seed)  # first: it changes which env is active
        self._set.active.reset(seed=seed, options=options)

    def step(self, action: Any) -> None:
        self._set.active.step(action)

    def observe(self, agent: str) -> Any:
        return self._set.active.observe(agent)

    def last(self, observe: bool = True) -> tuple:
        return self._set.active.last(observe)

    def agent_iter(self, max_iter: int = 2**63) -> Any:
        return self._set.active.agent_iter(max_iter)

    # Whatever the stepper reads of the env's state is the active env's.
    rewards = property(lambda self: self._set.active.rewards)
    terminations = property(lambda self: self._set.active.terminations)
    truncations = property(lambda self: self._set.active.truncations)
    infos = property(lambda self: self._set.active.infos)
    agent_selection = property(lambda self: self._set.active.agent_selection)
    _cumulative_rewards = property(lambda self: self._set.active._cumulative_rewards)


class EnvSetParallelEnv(_ActiveEnv, ParallelEnv):
    """The parallel API of an env set: one of its envs' parallel envs per episode, chosen at `reset`."""

    def __init__(self, source: EnvSetSource) -> None:
        self._start(source, parallel=True)

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        seed = self._set.choose(seed)  # first: it changes which env is active
        return self._set.active.reset(seed=seed, options=options)

    def step(self, actions: dict) -> tuple[dict, dict, dict, dict, dict]:
        return self._set.active.step(actions)


def run_env_spec(info: dict[str, Any], split: str | None = None, stage: int | None = None) -> EnvSpec:
    """The env of a run directory's run.json: `EnvSpec.of_run`, or for a run on an env set (its `env_set`) the
    set's `split` (None: "train") at `stage` (None: the first)."""
    table = info.get("env_set")
    if table is None:
        if split is not None:
            raise EnvSpecError(f"split {split!r}: the run did not train on an env set (pzasync train --env-set FILE)")
        return EnvSpec.of_run(info)
    envset = EnvSet.from_dict(table, "run.json")
    split = split or "train"
    if split != "train":  # the train split may be a curriculum's steps alone
        envset.split(split)
    source = EnvSetSource(envset, split, stage)
    return EnvSpec(source, {}, StateRequest.from_dict(info.get("env_state")), tuple(info.get("env_wrappers", ())))


def episode_env(env: Any) -> tuple[str, dict[str, Any]] | None:
    """The label and arguments of the env an env set's copy plays now (under any wrappers); None for an env that
    is not an env set's."""
    seen = 0
    while env is not None and seen < 64:
        if isinstance(env, (EnvSetEnv, EnvSetParallelEnv)):
            return env.episode_env
        env, seen = env.__dict__.get("env"), seen + 1
    return None
