"""Recorded transitions on disk (docs/running.md, "Recorded data"): what `pzasync rollout --record` writes and
`RunConfig.dataset` (`pzasync train --dataset`) reads.

A dataset is a directory:

    dataset.json    the header: format name and version, env id (kwargs, wrappers), seed, agent steps, episodes,
                    the player of each agent, and per agent its file, its number of rows and each field's dtype
                    and shape (one row's)
    AGENT.npz       that agent's transitions in decision order, one array per field, the keys of a buffer's rows:
                    obs (obs/<leaf> for nested observations), action, reward, next_obs (next_obs/<leaf>),
                    terminated, truncated, action_mask and next_action_mask (where the env has masks), and
                    episode (int32: which recorded episode each row belongs to)

Rows follow docs/transitions.md exactly (they are the transitions `rollout` and the actor assemble). Reading checks
every field against the run's layout of its agent, so a dataset of another env (or another version of the same
env) is refused by name before anything starts.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pzasync.core.spaces import AgentLayout
from pzasync.errors import DatasetError

#: The header's file name, and the format's name and version (a reader refuses other versions).
HEADER = "dataset.json"
FORMAT = "pzasync-dataset"
VERSION = 1
#: The column that numbers each row's episode (not a field of the buffer's rows).
EPISODE = "episode"


def layout_fields(layout: AgentLayout) -> dict[str, tuple[np.dtype, tuple[int, ...]]]:
    """The fields of one recorded row of an agent of this layout: name -> (dtype, shape of one row)."""
    fields: dict[str, tuple[np.dtype, tuple[int, ...]]] = {}
    for prefix in ("obs", "next_obs"):
        for leaf in layout.obs_leaves:
            name = prefix if not layout.nested_obs else f"{prefix}/{leaf.name}"
            fields[name] = (np.dtype(leaf.dtype), tuple(leaf.shape))
    fields["action"] = (np.dtype(layout.action_leaf.dtype), tuple(layout.action_leaf.shape))
    fields["reward"] = (np.dtype(np.float32), ())
    fields["terminated"] = (np.dtype(bool), ())
    fields["truncated"] = (np.dtype(bool), ())
    if layout.mask_shape is not None:
        fields["action_mask"] = fields["next_action_mask"] = (np.dtype(bool), tuple(layout.mask_shape))
    return fields


def _describe(dtype: Any, shape: Any) -> str:
    return f"{tuple(shape)} {np.dtype(dtype).name}"


@dataclass(frozen=True)
class AgentRecord:
    """One agent's part of a dataset: its file, its rows and each field's (dtype name, shape) from the header."""

    agent: str
    file: str
    rows: int
    fields: dict[str, tuple[str, tuple[int, ...]]]


@dataclass(frozen=True)
class Dataset:
    """A dataset's header, read by `open_dataset`; `rows(agent)` reads an agent's arrays."""

    path: Path
    env: str | None
    env_kwargs: dict[str, Any]
    env_wrappers: tuple[str, ...]
    agents: dict[str, AgentRecord]
    #: Everything else the header holds (players, seed, agent steps, episodes, returns).
    info: dict[str, Any]

    def rows_of(self, agent: str) -> int:
        """How many transitions the dataset holds for `agent` (0 for an agent it does not have)."""
        record = self.agents.get(agent)
        return record.rows if record is not None else 0

    def check(self, agent: str, layout: AgentLayout) -> None:
        """DatasetError unless `agent`'s recorded fields are exactly those of the run's `layout` (dtype and shape
        of each): the message names the dataset, the agent, the field and both shapes."""
        record = self.agents.get(agent)
        if record is None:
            return
        expected = layout_fields(layout)
        for name, (dtype, shape) in expected.items():
            if name not in record.fields:
                raise DatasetError(f"dataset {str(self.path)!r}: agent {agent!r} has no field {name!r}, which the "
                                   f"run's layout has ({_describe(dtype, shape)}); it has {sorted(record.fields)}")
            got_dtype, got_shape = record.fields[name]
            if np.dtype(got_dtype) != dtype or tuple(got_shape) != shape:
                raise DatasetError(
                    f"dataset {str(self.path)!r}: agent {agent!r}, field {name!r}: the dataset's rows are "
                    f"{_describe(got_dtype, got_shape)}, the run's layout of {agent!r} is {_describe(dtype, shape)} "
                    f"(recorded on env {self.env!r}); record the dataset on this run's env and wrappers")
        extra = sorted(set(record.fields) - set(expected))
        if extra:
            raise DatasetError(f"dataset {str(self.path)!r}: agent {agent!r} has field(s) {extra} that the run's "
                               f"layout of {agent!r} does not have (recorded on env {self.env!r})")

    def rows(self, agent: str) -> dict[str, np.ndarray]:
        """`agent`'s transitions as arrays keyed like a buffer's batch (and `episode`), checked against the
        header: a file whose arrays differ from what the header says is refused, naming the field."""
        record = self.agents.get(agent)
        if record is None:
            raise DatasetError(f"dataset {str(self.path)!r} has no transitions of agent {agent!r}; it holds "
                               f"{sorted(self.agents)}")
        file = self.path / record.file
        try:
            with np.load(file, allow_pickle=False) as data:
                arrays = {key: data[key] for key in data.files}
        except (OSError, ValueError) as exc:
            raise DatasetError(f"dataset {str(self.path)!r}: cannot read {record.file!r} of agent {agent!r} "
                               f"({type(exc).__name__}: {exc})") from None
        for name, (dtype, shape) in record.fields.items():
            array = arrays.get(name)
            if array is None or array.dtype != np.dtype(dtype) or array.shape != (record.rows, *shape):
                got = "missing" if array is None else f"{array.shape} {array.dtype.name}"
                raise DatasetError(f"dataset {str(self.path)!r}: {record.file!r}, field {name!r} of agent {agent!r} "
                                   f"is {got}; the header says {record.rows} rows of {_describe(dtype, shape)}")
        return arrays


def open_dataset(path: str | os.PathLike) -> Dataset:
    """Read a dataset's header (`path`: its directory, or its dataset.json): DatasetError, naming the path, for
    anything that is not a dataset of this format's version."""
    path = Path(path)
    folder = path.parent if path.name == HEADER else path
    header_file = folder / HEADER
    if not header_file.is_file():
        what = "does not exist" if not folder.exists() else f"has no {HEADER}"
        raise DatasetError(f"dataset {str(path)!r} {what}; record one with `pzasync rollout ENV --record PATH`")
    try:
        header = json.loads(header_file.read_text())
    except (OSError, ValueError) as exc:
        raise DatasetError(f"dataset {str(path)!r}: cannot read {HEADER} ({type(exc).__name__}: {exc})") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise DatasetError(f"dataset {str(path)!r}: {HEADER} is not a {FORMAT} header")
    if header.get("version") != VERSION:
        raise DatasetError(f"dataset {str(path)!r}: format version {header.get('version')!r}; this pzasync reads "
                           f"version {VERSION}")
    agents = {
        agent: AgentRecord(agent, entry["file"], int(entry["rows"]),
                           {name: (str(f["dtype"]), tuple(int(d) for d in f["shape"]))
                            for name, f in entry["fields"].items()})
        for agent, entry in header.get("agents", {}).items()
    }
    info = {k: v for k, v in header.items()
            if k not in ("format", "version", "env", "env_kwargs", "env_wrappers", "agents")}
    return Dataset(folder, header.get("env"), dict(header.get("env_kwargs") or {}),
                   tuple(header.get("env_wrappers") or ()), agents, info)


def _file_name(agent: str, taken: set[str]) -> str:
    base = "".join(c if c.isalnum() or c in "-_." else "_" for c in agent) or "agent"
    name, n = f"{base}.npz", 1
    while name in taken:
        n += 1
        name = f"{base}-{n}.npz"
    taken.add(name)
    return name


def write_dataset(path: str | os.PathLike, arrays: dict[str, dict[str, np.ndarray]],
                  layouts: dict[str, AgentLayout], *, env: str | None, env_kwargs: dict[str, Any] | None = None,
                  env_wrappers: tuple[str, ...] = (), **info: Any) -> Dataset:
    """Write per-agent transition arrays (`arrays[agent][field]`, the fields of `layout_fields` and `episode`) as a
    dataset at `path`, a directory that must not exist yet (or be empty); `info` goes into the header as is
    (players, seed, agent steps, episodes...). The files are written into a temporary directory beside `path` and
    moved there at the end, so a failure leaves nothing behind. Returns the dataset as `open_dataset` reads it."""
    target = Path(path)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise DatasetError(f"dataset {str(target)!r} already exists; record into a new directory")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        umask = os.umask(0)
        os.umask(umask)
        staging.chmod(0o777 & ~umask)  # mkdtemp's 0o700 would keep the dataset from the user's group
        taken: set[str] = set()
        agents: dict[str, Any] = {}
        for agent, columns in arrays.items():
            expected = layout_fields(layouts[agent])
            rows = len(columns["reward"])
            for name, (dtype, shape) in expected.items():
                array = columns[name]
                if array.dtype != dtype or array.shape != (rows, *shape):
                    raise DatasetError(f"agent {agent!r}, field {name!r}: {array.shape} {array.dtype.name} does not "
                                       f"match its layout, {rows} rows of {_describe(dtype, shape)}")
            file = _file_name(agent, taken)
            kept = {name: columns[name] for name in expected}
            kept[EPISODE] = np.asarray(columns[EPISODE], dtype=np.int32)
            np.savez(staging / file, **kept)  # type: ignore[arg-type]
            agents[agent] = {"file": file, "rows": rows,
                             "fields": {name: {"dtype": dtype.name, "shape": list(shape)}
                                        for name, (dtype, shape) in expected.items()}}
        header = {"format": FORMAT, "version": VERSION, "env": env, "env_kwargs": dict(env_kwargs or {}),
                  "env_wrappers": list(env_wrappers), **info, "agents": agents}
        (staging / HEADER).write_text(json.dumps(header, indent=1, default=str))
        if target.exists():
            target.rmdir()
        os.replace(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return open_dataset(target)


def unit_rows(dataset: Dataset, seats: list[str], layout: AgentLayout, grouped: bool) -> dict[str, np.ndarray]:
    """The rows of a learning unit: its seats' transitions (each checked against `layout`), concatenated in seat
    order, the fields of a buffer's batch (`episode` dropped); with `grouped` (an agent group), a `member` column
    (int16) says whose each row is, as in the buffer. Seats the dataset lacks are skipped; no rows at all gives
    empty arrays."""
    fields = layout_fields(layout)
    parts: dict[str, list[np.ndarray]] = {name: [] for name in fields}
    members: list[np.ndarray] = []
    for index, seat in enumerate(seats):
        if seat not in dataset.agents:
            continue
        dataset.check(seat, layout)
        rows = dataset.rows(seat)
        for name in fields:
            parts[name].append(rows[name])
        members.append(np.full(len(rows["reward"]), index, np.int16))
    out = {name: (np.concatenate(chunks) if chunks else np.zeros((0, *fields[name][1]), fields[name][0]))
           for name, chunks in parts.items()}
    if grouped:
        out["member"] = np.concatenate(members) if members else np.zeros(0, np.int16)
    return out
