"""What the commands share: the consoles, the texts of learner specs and KEY=VALUE options, and the line that
says how an evaluation scored."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from pzasync.errors import UserInputError
from pzasync.specs import parse_key_value, parse_learner_spec

console = Console()
errors = Console(stderr=True)


def with_learner_for(learners: Any, learner_for: tuple[str, ...]) -> Any:
    """A learner spec for every agent, and repeated --learner-for AGENT=SPEC -> a learner spec for the runners."""
    if not learner_for:
        return learners
    per_agent: dict[str, Any] = dict(learners) if isinstance(learners, dict) else {"*": learners}
    for item in learner_for:
        agent, sep, spec = item.partition("=")
        if not sep:
            raise UserInputError(f"--learner-for {item!r}: expected AGENT=SPEC")
        per_agent[agent] = parse_learner_spec(spec)
    return per_agent


def learners_from_options(learner: str, learner_for: tuple[str, ...]) -> Any:
    """--learner SPEC and repeated --learner-for AGENT=SPEC -> a learner spec for the runners."""
    return with_learner_for(parse_learner_spec(learner), learner_for)


def parse_options(items: tuple[str, ...], flag: str) -> dict[str, Any]:
    """Repeated `flag KEY=VALUE` (--env-arg) -> keyword arguments, values read as Python literals."""
    return dict(parse_key_value(item, f"{flag} {item!r}: expected KEY=VALUE") for item in items)


def scoring_line(report: Any) -> str:
    """The line that says how an evaluation scored, and why (`pzasync eval`, the end of `pzasync train`)."""
    how = {"seats": "each seat against the yardstick",
           "team": "every seat its trained policy, the team's summed return",
           "sides": "each side (" + ", ".join(f"{u}: {len(m)}" for u, m in report.units.items())
                    + " agents) against the others"}[report.scoring]
    return f"scoring: {report.scoring} ({how}), because {report.scoring_reason}; --scoring seats|team|sides chooses"
