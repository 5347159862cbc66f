"""Agent groups (parameter sharing, `RunConfig.agent_groups`): patterns expanded against an env's agents."""

from __future__ import annotations

import fnmatch

from pzasync.errors import ConfigError


def resolve_groups(groups: dict[str, list[str]], agents: list[str]) -> dict[str, list[str]]:
    """Expand `RunConfig.agent_groups` patterns against the env's agents: group -> members in env order."""
    taken: dict[str, str] = {}
    resolved: dict[str, list[str]] = {}
    for group, patterns in groups.items():
        if group in agents:
            raise ConfigError(f"agent group {group!r} has the name of one of the env's agents; rename the group")
        members = []
        for pattern in patterns:
            matched = [a for a in agents if fnmatch.fnmatchcase(a, pattern)]
            if not matched:
                raise ConfigError(f"agent group {group!r}: {pattern!r} matches none of the env's agents {agents}")
            members += [a for a in matched if a not in members]
        for agent in members:
            if agent in taken:
                raise ConfigError(f"agent {agent!r} is in two agent groups, {taken[agent]!r} and {group!r}")
            taken[agent] = group
        resolved[group] = [a for a in agents if a in members]
    return resolved
