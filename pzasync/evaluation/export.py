"""`pzasync export`: a run's policies as files that act with torch alone (or onnxruntime), no pzasync import.

One file per learning unit (an agent, or an agent group whose members share one policy), each with a JSON
sidecar that says how to call it (docs/export.md). The file holds the policy's `acting_module()`
(learners/acting.py: observation leaves, action mask, a recurrent policy's memory and a `greedy` flag in; actions,
and the memory to carry, out), traced by `torch.export` and written with `torch.export.save` (format "pt2", loaded
with `torch.export.load(path).module()`), or by `torch.onnx.export` (format "onnx", run with onnxruntime; the
`export` extra). TorchScript (`torch.jit.script`/`trace`) is deprecated in the torch this targets (2.13 warns on
both), so the torch format is torch.export's.

Policies are those `pzasync eval` plays (`load_run_policies`), built for the env they act in: a mappo policy acts
on what its agent observes, never on `env.state()`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
from gymnasium import spaces

from pzasync.core.groups import resolve_groups
from pzasync.core.spaces import AgentLayout
from pzasync.errors import ConfigError
from pzasync.evaluation.evaluate import load_run_policies
from pzasync.extras import require
from pzasync.runtime.rundir import RunDirectory, safe_name

#: The file formats, each with its file name's suffix.
FORMATS = {"pt2": ".pt2", "onnx": ".onnx"}
#: Rows of the example inputs traced (any number of rows acts: the batch dimension is dynamic).
TRACE_ROWS = 2


@dataclass
class ExportUnit:
    """One file's worth: a learning unit's policy (shared by `agents`), its layout and acting module."""

    name: str
    agents: list[str]
    policy: Any
    layout: AgentLayout
    learner: str
    module: Any = field(default=None, repr=False)


def export(run_dir: str | os.PathLike, out_dir: str | os.PathLike | None = None, format: str = "pt2",
           progress: Callable[[str, int, int], None] | None = None) -> list[Path]:
    """Write one file per learning unit of `run_dir` that acts with torch alone ("pt2") or onnxruntime ("onnx"),
    and beside each a JSON sidecar (same name, `.json`) with its calling convention; returns the files' paths.

    `out_dir`: where (default: RUN_DIR/export). Every policy is checked exportable before any file is written; a
    file is written under a temporary name and renamed when whole. `progress(unit, done, total)` is called after
    each file."""
    if format not in FORMATS:
        raise ConfigError(f"export format {format!r}: expected one of {', '.join(FORMATS)}")
    if format == "onnx":
        require("export", "pzasync export --format onnx")
    run = RunDirectory(run_dir, create=False)
    info = run.read_json("run.json")
    units = export_units(info, load_run_policies(run.path))
    for unit in units:
        try:
            unit.module = unit.policy.acting_module()
        except NotImplementedError as exc:
            raise ConfigError(f"agent {unit.agents[0]!r}: its policy ({unit.learner}) cannot be exported: {exc}") \
                from None
    out = Path(out_dir) if out_dir is not None else run.path / "export"
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"export out_dir={str(out)!r}: cannot create it ({exc.strerror or exc})") from None
    written = []
    for done, unit in enumerate(units, 1):
        path = out / f"{safe_name(unit.name)}{FORMATS[format]}"
        with _replacing(path) as partial:
            (write_pt2 if format == "pt2" else write_onnx)(unit.module, partial)
        with _replacing(path.with_suffix(".json")) as partial:
            partial.write_text(json.dumps(sidecar(unit, path.name, format, info, str(run_dir)), indent=2))
        written.append(path)
        if progress is not None:
            progress(unit.name, done, len(units))
    return written


def export_units(info: dict[str, Any], policies: dict[str, tuple[Any, AgentLayout]]) -> list[ExportUnit]:
    """The run's policies grouped into files: one per learning unit (its agent group's name, or its agent's);
    a group whose members need policies of different layouts gets one per layout, named `group.agent`."""
    learners = info.get("learners") or {}
    agents = list(dict.fromkeys([*learners, *policies]))  # players without a checkpoint are in groups too
    groups = resolve_groups(dict(info.get("config", {}).get("agent_groups") or {}), agents)
    group_of = {a: g for g, members in groups.items() for a in members}
    by_policy: dict[int, ExportUnit] = {}
    for agent, (policy, layout) in policies.items():
        unit = by_policy.get(id(policy))
        if unit is None:
            learner = str((learners.get(agent) or {}).get("learner", type(policy).__name__))
            by_policy[id(policy)] = ExportUnit(group_of.get(agent, agent), [agent], policy, layout, learner)
        else:
            unit.agents.append(agent)
    units = list(by_policy.values())
    for unit in units:
        if sum(other.name == unit.name for other in units) > 1:
            unit.name = f"{unit.name}.{unit.agents[0]}"
    return units


@contextlib.contextmanager
def _replacing(path: Path) -> Iterator[Path]:
    """A temporary path beside `path` to write, renamed to `path` when the block ends, removed if it fails."""
    partial = path.with_name(f".{path.stem}.partial{path.suffix}")  # torch.export.save wants its suffix
    try:
        yield partial
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


def _dynamic_batch(module: Any) -> dict[str, tuple[dict[int, Any] | None, ...]]:
    """torch.export's dynamic shapes of the acting module's inputs: the first dimension of each (not `greedy`)."""
    import torch

    batch = torch.export.Dim("batch")
    return {"inputs": tuple({0: batch} if x.dim() else None for x in module.example_inputs(TRACE_ROWS))}


def write_pt2(module: Any, path: Path) -> None:
    """The acting module traced by `torch.export` (any number of rows) and saved as a .pt2 archive."""
    import torch

    program = torch.export.export(module, module.example_inputs(TRACE_ROWS), dynamic_shapes=_dynamic_batch(module))
    torch.export.save(program, str(path))


def write_onnx(module: Any, path: Path) -> None:
    """The acting module as an ONNX model (torch.onnx's exporter), inputs and outputs named as the sidecar says."""
    import torch

    names = [i["name"] for i in module.inputs()]
    outputs = [o["name"] for o in module.outputs()]
    with warnings.catch_warnings(), _quiet("torch.onnx"):
        # torch's own notices while it converts (deprecations inside torch, a shared axis name): not the user's
        warnings.simplefilter("ignore", FutureWarning)
        warnings.filterwarnings("ignore", message=".*axis name.*")
        program = torch.onnx.export(module, module.example_inputs(TRACE_ROWS), dynamo=True, verbose=False,
                                    input_names=names, output_names=outputs, dynamic_shapes=_dynamic_batch(module))
        if program is None:
            raise RuntimeError("torch.onnx.export returned no program")
        program.save(str(path))


@contextlib.contextmanager
def _quiet(logger: str) -> Iterator[None]:
    """A logger's records below ERROR silenced for the block (torch.onnx logs the operators it skips)."""
    log = logging.getLogger(logger)
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


def space_json(space: spaces.Space) -> dict[str, Any]:
    """An action space as JSON values (non-finite Box bounds as "inf" / "-inf")."""
    if isinstance(space, spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, spaces.Box):
        def bounds(values: np.ndarray) -> list[Any]:
            return [float(v) if np.isfinite(v) else ("inf" if v > 0 else "-inf") for v in values.reshape(-1)]

        return {"type": "Box", "shape": list(space.shape), "dtype": str(space.dtype), "low": bounds(space.low),
                "high": bounds(space.high)}
    return {"type": type(space).__name__, "repr": str(space)}


def sidecar(unit: ExportUnit, file: str, format: str, info: dict[str, Any], run_dir: str) -> dict[str, Any]:
    """What the JSON beside an exported file says: whose policy, for which env, and how to call it."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        pzasync_version = version("pzasync")
    except PackageNotFoundError:
        pzasync_version = "unknown"
    module = unit.module
    inputs, outputs = module.inputs(), module.outputs()
    names = ", ".join(i["name"].replace("/", "_") for i in inputs)
    if format == "pt2":
        call = (f"policy = torch.export.load({file!r}).module(); "
                f"{', '.join(o['name'] for o in outputs)} = policy({names}) (torch tensors, in this order)")
    else:
        call = (f"session = onnxruntime.InferenceSession({file!r}); "
                f"{', '.join(o['name'] for o in outputs)} = session.run(None, {{name: array for each input}}) "
                f"(numpy arrays; greedy as np.array(True))")
    layout = unit.layout
    return {
        "format": format, "file": file, "pzasync_version": pzasync_version,
        "unit": unit.name, "agents": unit.agents, "learner": unit.learner, "run_dir": run_dir,
        "env": info.get("env"), "env_kwargs": info.get("env_kwargs", {}), "env_wrappers": info.get("env_wrappers", []),
        "observation": {
            "space": str(layout.obs_space),
            "leaves": [{"name": i["name"], "shape": i["shape"][1:], "dtype": i["dtype"]}
                       for i in inputs if i["name"].startswith("obs")],
            "preprocessing": "none beyond the env's own wrappers (env_wrappers): stack the env's observations of "
                             "the agents acting one per row (the action mask taken out of a dict observation, as "
                             "bool), each input in exactly the dtype given here",
        },
        "mask": layout.has_mask,
        "memory_size": int(module.memory_size),
        "action_space": space_json(layout.action_space),
        "inputs": inputs,
        "outputs": outputs,
        "greedy": "greedy=True: the action pzasync's greedy evaluation takes; greedy=False: " + {
            "q": f"epsilon-greedy over the legal actions at epsilon {module.epsilon} (the learner's final rate)",
            "categorical": "a draw from the masked action distribution",
            "gaussian": "the mean plus Gaussian noise of the policy's std, then clipped",
        }[module.rule] + " (torch's global generator: torch.manual_seed repeats it)",
        "call": call,
    }
