"""RunConfig: every run option, one flat set declared in groups (config/groups.py), validated before any process
starts (docs/reliability.md, invariant 7): every error names the option at fault."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Mapping

from pzasync.config.groups import (
    GROUPS,
    ActingOptions,
    EvaluationOptions,
    LeagueOptions,
    LearningOptions,
    RayOptions,
    ReliabilityOptions,
    RunOptions,
)
from pzasync.config.toml import dumps, values
from pzasync.errors import ConfigError


@dataclass(kw_only=True)
class RunConfig(RunOptions, ActingOptions, LearningOptions, LeagueOptions, EvaluationOptions, ReliabilityOptions,
                RayOptions):
    """Options shared by AsyncRunner and SequentialRunner, so both run the same algorithm from the same seed.

    Every option is a keyword and an attribute (`RunConfig(seed=0, eval_vs="random")`, `config.eval_vs`); each
    is declared, with its doc and check, in one of the groups of `GROUPS`."""

    def validate(self) -> RunConfig:
        """Raise ConfigError naming the first bad option; returns self. Each option's own check comes from its
        declaration; the checks here are those between options."""
        self.check_options()

        def bad(name: str, why: str) -> None:
            raise ConfigError(f"option {name}={getattr(self, name)!r}: {why}")

        if self.tracker and self.out_dir is None:
            bad("tracker", "trackers are opened with the run directory: give out_dir too")
        if self.ray_address is not None and self.backend != "ray":
            bad("ray_address", "connects to a Ray cluster: it needs backend='ray'")
        if self.ray_actor_resources is not None and self.backend != "ray":
            bad("ray_actor_resources", "places the actor on a Ray cluster: it needs backend='ray'")
        if self.learner_processes is not None and self.backend != "shm":
            bad("learner_processes", f"groups learners into local processes on shared memory; with "
                                     f"backend={self.backend!r} every learner unit is its own Ray actor")
        workers, copies = self.env_workers, self.envs_per_actor  # each a number or AUTO, the one string allowed
        if not isinstance(workers, str) and not isinstance(copies, str) and workers > copies:
            bad("env_workers", f"must be at most envs_per_actor={self.envs_per_actor}: each worker steps at least "
                               f"one env copy")
        if not isinstance(self.actors, str) and self.actors > 1:  # a number or AUTO, the one string allowed
            if self.league:
                bad("actors", "a league keeps its snapshot pool and ratings in one actor; use actors=1 with a "
                              "league, or more envs_per_actor")
        return self

    def device_for(self, agent: str) -> str:
        """The torch device of `agent`'s (or its group's) learner."""
        return self.devices.get(agent, self.device)

    def as_dict(self) -> dict[str, Any]:
        """Every option by name: run.json's flat "config" (read back by `from_dict`)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> RunConfig:
        """`as_dict`'s inverse (some options may be left out), validated."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"unknown run option(s) {unknown}; known options: {sorted(known)}")
        return cls(**values).validate()

    def to_toml(self, header: str = "", unset: Mapping[str, str] | None = None) -> str:
        """Every option as TOML, one table per group (`pzasync train --print-config`); `header` becomes the
        opening comment. `from_toml` reads it back to an equal RunConfig. The options of `unset` are written
        commented out, with the reason, so that reading the file leaves them to whoever reads it."""
        return dumps(self, GROUPS, header, unset)

    @classmethod
    def toml_values(cls, text: str, source: str = "config file") -> dict[str, Any]:
        """The options a TOML text sets (group tables, or flat keys), each checked on its own; errors start with
        `source`. What the text leaves out is not in the dict (`pzasync train --config` fills it); its learners
        (`[learners.NAME]` tables, pzasync/training/learner_file.py) are read apart."""
        return values(text, GROUPS, source, others=("learners",))

    @classmethod
    def from_toml(cls, path: str | Path) -> RunConfig:
        """A RunConfig from a TOML file: its options, the defaults for the rest, validated."""
        return cls(**cls.toml_values(Path(path).read_text(), str(path))).validate()
