"""Option text as the peers' command lines take it, read the way pzasync reads its specs (shared by the peers).

    parse_spec("resize_v1,x_size=64,y_size=64")  ->  ("resize_v1", {"x_size": 64, "y_size": 64})

Imports nothing but the standard library, so every peer's virtualenv can use it.
"""

from __future__ import annotations

import ast
from typing import Any


def parse_spec(text: str) -> tuple[str, dict[str, Any]]:
    """'resize_v1,x_size=64,y_size=64' -> ('resize_v1', {'x_size': 64, 'y_size': 64}), as pzasync writes wrappers."""
    name, *items = text.split(",")
    return name, {key: literal(value) for key, _, value in (item.partition("=") for item in items)}


def literal(text: str) -> Any:
    """A Python literal, else the text itself (`mode=B`), as pzasync reads spec values."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text
