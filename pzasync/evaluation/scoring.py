"""Scoring modes: what a trained result is scored as, so that the score fits the game (docs/league.md, "Scoring").

- "seats" (competitive games): each trained seat alone, every other seat played by the yardstick;
- "team" (cooperative games): every seat plays its trained policy, the score is the team's return, the sum of
  every agent's return in an episode;
- "sides" (mixed games: simple_tag, simple_adversary): agents sharing a name prefix form a side (adversary_0,
  adversary_1 | agent_0); each side plays its trained policies against the other sides played by the
  yardstick, scored by the side's summed return.

`choose_scoring` says which mode applies, and why: the one asked for, else the env's recipe's
(`pzasync.recipes.scoring_for`), else a default read from the env (`default_scoring`).
"""

from __future__ import annotations

import re
from typing import Any, Sequence

import numpy as np

from pzasync.core.environments import EnvSpec
from pzasync.errors import ConfigError
from pzasync.recipes import SCORING_MODES, scoring_for

__all__ = ["SCORING_MODES", "choose_scoring", "default_scoring", "sides_of", "units_for"]

#: Agent steps of random play `default_scoring` reads rewards from.
PROBE_STEPS = 600


def side_name(agent: str) -> str:
    """An agent's side: its name without a trailing `_<number>` (or `<number>`): adversary_2 -> adversary."""
    return re.sub(r"_?\d+$", "", agent) or agent


def sides_of(agents: Sequence[str]) -> dict[str, list[str]]:
    """Agents grouped by name prefix (`side_name`), in the env's order: {"adversary": [...], "agent": [...]}."""
    sides: dict[str, list[str]] = {}
    for agent in agents:
        sides.setdefault(side_name(agent), []).append(agent)
    return sides


def units_for(scoring: str, agents: Sequence[str], trained: Sequence[str]) -> dict[str, list[str]]:
    """The units scored in a mode, each with its members: every trained seat alone ("seats"), the whole team
    ("team"), or every side with a trained member ("sides")."""
    if scoring == "seats":
        return {agent: [agent] for agent in sorted(trained)}
    if scoring == "team":
        return {"team": list(agents)}
    if scoring == "sides":
        return {side: members for side, members in sides_of(agents).items() if set(members) & set(trained)}
    raise ConfigError(f"scoring {scoring!r}: must be one of {', '.join(SCORING_MODES)}")


def default_scoring(env_spec: Any, seed: int = 0) -> tuple[str, str]:
    """The mode of an env without a recipe's, read from the env, and why (documented in docs/league.md). The
    random play is seeded with `seed`, not the evaluation's, so that every evaluation of a run agrees:

    1. agents named with several prefixes (adversary_*, agent_*) -> "sides";
    2. one agent -> "seats" (a team of one is its seat);
    3. random play for a few hundred agent steps: every agent's episode return the same -> "team" (one shared
       reward); the returns of each episode summing to zero -> "seats" (a zero-sum game: what one wins the
       others lose);
    4. else "seats" (today's per-seat scoring). One agent group for every agent is no sign of a team: it
       shares parameters, which symmetric competitive games use too (pzasync.envs.forage's foragers compete
       for food, and are trained that way in the tests).
    """
    from pzasync.core.collect import run_episodes
    from pzasync.core.transitions import LayoutBook
    from pzasync.evaluation.evaluate import random_actor

    spec = env_spec if isinstance(env_spec, EnvSpec) else EnvSpec.of(env_spec)
    env = spec.make()
    try:
        agents = list(env.possible_agents)
        sides = sides_of(agents)
        if len(sides) > 1:
            return "sides", "agents named with several prefixes (" + ", ".join(f"{s}_*" for s in sides) + ")"
        if len(agents) == 1:
            return "seats", "one agent"
        summaries: list[Any] = []
        act = random_actor(env, seed)
        run_episodes(env, lambda a, o, m: (act(a, o, m), {}), lambda t: None, agent_steps=PROBE_STEPS, seed=seed,
                     layouts=LayoutBook(env), on_episode=summaries.append)
    finally:
        env.close()
    returns = np.array([[s.returns.get(a, 0.0) for a in agents] for s in summaries]).reshape(-1, len(agents))
    paid = bool(np.any(returns != 0))
    if paid and np.allclose(returns, returns[:, :1], atol=1e-6):
        return "team", f"every agent's return was the same in {len(returns)} episodes of random play (a shared reward)"
    if paid and np.allclose(returns.sum(axis=1), 0.0, atol=1e-6):
        return "seats", f"the returns summed to zero in {len(returns)} episodes of random play (a zero-sum game)"
    return "seats", "no sign of a team in the env (one name prefix, rewards neither shared nor zero-sum)"


def choose_scoring(env_spec: Any, scoring: str | None = None) -> tuple[str, str]:
    """(mode, why): `scoring` if given, else the env's recipe's, else `default_scoring`'s."""
    spec = env_spec if isinstance(env_spec, EnvSpec) else EnvSpec.of(env_spec)
    if scoring is not None:
        if scoring not in SCORING_MODES:
            raise ConfigError(f"scoring {scoring!r}: must be one of {', '.join(SCORING_MODES)}")
        return scoring, "it was asked for"
    known = scoring_for(spec.base_name)
    if known is not None:
        return known, f"the recipes say so for {spec.name.rsplit('.', 1)[-1]}"
    mode, why = default_scoring(spec)
    return mode, f"no recipe says, and {why}"
