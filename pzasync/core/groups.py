"""Agent groups (parameter sharing, `RunConfig.agent_groups`): patterns expanded against an env's agents; the
learning units of a run and the short names its displays give their members."""

from __future__ import annotations

import fnmatch
import re
from typing import Mapping, Sequence

from pzasync.errors import ConfigError


def resolve_groups(groups: dict[str, list[str]], agents: list[str]) -> dict[str, list[str]]:
    """Expand `RunConfig.agent_groups` patterns against the env's agents: group -> members in env order."""
    taken: dict[str, str] = {}
    resolved: dict[str, list[str]] = {}
    for group, patterns in groups.items():
        if group in agents:
            raise ConfigError(f"agent group {group!r} has the name of one of the env's agents; rename the group")
        members: dict[str, None] = {}  # in the order matched; a dict, so that hundreds of agents stay linear
        for pattern in patterns:
            matched = [a for a in agents if fnmatch.fnmatchcase(a, pattern)]
            if not matched:
                raise ConfigError(f"agent group {group!r}: {pattern!r} matches none of the env's agents {agents}")
            members.update(dict.fromkeys(matched))
        for agent in members:
            if agent in taken:
                raise ConfigError(f"agent {agent!r} is in two agent groups, {taken[agent]!r} and {group!r}")
            taken[agent] = group
        resolved[group] = [a for a in agents if a in members]
    return resolved


#: A name that ends in a number (no leading zeros unless the number is 0): its prefix and the number.
_NUMBERED = re.compile(r"^(.*?)(0|[1-9][0-9]*)$")


def members_label(members: Sequence[str], limit: int = 4) -> str:
    """A short name for a list of agents, for one line of a display: runs of three or more consecutive numbers
    with one prefix as a range (`red_0..red_80`), the pieces joined with ", " and cut after `limit` with "…",
    and the count when there are several: `red_0..red_80 (81 agents)`."""
    pieces: list[str] = []
    i = 0
    while i < len(members):
        end = i + 1
        numbered = _NUMBERED.match(members[i])
        if numbered:
            prefix, first = numbered.group(1), int(numbered.group(2))
            while end < len(members) and members[end] == f"{prefix}{first + end - i}":
                end += 1
        pieces += [f"{members[i]}..{members[end - 1]}"] if end - i >= 3 else list(members[i:end])
        i = end
    text = ", ".join(pieces[:limit]) + (", …" if len(pieces) > limit else "")
    return text if len(members) <= 1 else f"{text} ({len(members)} agents)"


def units_in_order(unit_of: Mapping[str, str]) -> dict[str, list[str]]:
    """Learning units from each agent's unit (its own name, or its group's), in the order of each unit's first
    agent: unit -> its agents, in the order given (env order)."""
    units: dict[str, list[str]] = {}
    for agent, unit in unit_of.items():
        units.setdefault(unit, []).append(agent)
    return units
