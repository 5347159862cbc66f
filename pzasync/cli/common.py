"""What the commands share: the consoles, the text of KEY=VALUE options, and the line that says how an evaluation
scored."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from pzasync.specs import parse_key_value

console = Console()
errors = Console(stderr=True)


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
