"""What crosses the remote env protocol as JSON (docs/remote.md, "Infos"): infos (less their action mask)
and reset options. Values are made plain explicitly, so that both sides agree on what arrives: numbers,
strings, booleans, None, lists and dicts with string keys; numpy scalars become Python numbers and booleans,
numpy arrays and tuples become (nested) lists. Anything else is refused with the path to it."""

from __future__ import annotations

from typing import Any

import numpy as np

from pzasync.errors import RemoteSpaceError

_SCALARS = (str, int, float, bool, type(None))


def plain(value: Any, where: str) -> Any:
    """`value` as plain JSON values (module docstring); RemoteSpaceError naming `where` and the key if some
    part of it has no JSON form."""
    if isinstance(value, _SCALARS):
        return value
    if isinstance(value, np.generic):
        return value.item() if isinstance(value, (np.number, np.bool_)) else _refuse(value, where)
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "biuf":
            _refuse(value, where)
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [plain(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        out = {}
        for key, v in value.items():
            if isinstance(key, np.generic):
                key = key.item()
            if not isinstance(key, (str, int, float, bool)):
                raise RemoteSpaceError(f"{where}: key {key!r} ({type(key).__name__}) has no JSON form; keys cross "
                                       f"as strings (docs/remote.md, \"Infos\")")
            out[key if isinstance(key, str) else str(key)] = plain(v, f"{where}[{key!r}]")
        return out
    return _refuse(value, where)


def _refuse(value: Any, where: str) -> Any:
    raise RemoteSpaceError(f"{where} is {type(value).__module__}.{type(value).__qualname__} {value!r:.80}, which "
                           f"has no JSON form; infos and reset options cross as JSON: numbers, strings, booleans, "
                           f"None, lists and dicts (numpy numbers and arrays become numbers and lists; "
                           f"docs/remote.md, \"Infos\")")
