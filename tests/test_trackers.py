"""Experiment trackers (RunConfig.tracker, pzasync/runtime/trackers): the seam gets what TensorBoard gets, a failing
tracker never stops a run, every tracker is closed however the run ends; real short runs with Weights & Biases
(offline) and MLflow (a file store), each skipped without its package, read back from what they wrote."""

from __future__ import annotations

import json
import os
import signal
import struct
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import pzasync
from pzasync.config import RunConfig
from pzasync.config.groups import parse_trackers
from pzasync.errors import ConfigError, UserInputError
from pzasync.runners import SequentialRunner
from pzasync.runtime.rundir import RunDirectory
from pzasync.runtime.trackers import FAILED, FINISHED, KILLED, TrackedRun, Trackers, check_trackers
from pzasync.runtime.trackers.base import eval_scalars, flat_params, metric_scalars

TTT = "pettingzoo.classic.tictactoe_v3"
#: RunConfig.tracker naming the recording tracker below (tests/ is on sys.path: conftest.py).
RECORDING = "test_trackers:RecordingTracker"


class RecordingTracker:
    """A tracker that keeps every call, for the tests to compare with what TensorBoard and the run's files got."""

    opened: list[RecordingTracker] = []

    def __init__(self, run: TrackedRun) -> None:
        self.run = run
        self.metrics: list[tuple[str, int, dict]] = []
        self.evals: list[dict] = []
        self.files: list[Path] = []
        self.closed: list[str] = []
        RecordingTracker.opened.append(self)

    def log_metrics(self, unit, step, metrics):
        self.metrics.append((unit, step, dict(metrics)))

    def log_eval(self, row):
        self.evals.append(dict(row))

    def log_file(self, path):
        self.files.append(path)

    def close(self, status=FINISHED):
        self.closed.append(status)

    def scalars(self) -> set[tuple[str, int, float]]:
        """(name, step, value) of every scalar, named as every tracker names them (base.py)."""
        out = {(tag, step, v) for unit, step, metrics in self.metrics
               for tag, v in metric_scalars(unit, metrics).items()}
        return out | {(tag, row["agent_steps"], v) for row in self.evals for tag, v in eval_scalars(row).items()}


class BrokenTracker(RecordingTracker):
    """Raises on its first evaluation row."""

    def log_eval(self, row):
        raise OSError("disk full")


@pytest.fixture(autouse=True)
def _fresh_recordings():
    RecordingTracker.opened = []


def as_float32(scalars: set[tuple[str, int, float]]) -> set[tuple[str, int, float]]:
    """Scalars at the precision TensorBoard keeps them (float32)."""
    return {(tag, step, float(np.float32(value))) for tag, step, value in scalars}


def _tensorboard_scalars(path: Path) -> set[tuple[str, int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(path))
    accumulator.Reload()
    return {(tag, e.step, e.value) for tag in accumulator.Tags()["scalars"] for e in accumulator.Scalars(tag)}


def _new_run_dir(tmp_path: Path) -> RunDirectory:
    rd = RunDirectory(tmp_path / "tictactoe_v3-20260101-000000")
    rd.write_json("run.json", {"env": TTT, "config": RunConfig(out_dir=str(tmp_path)).as_dict(),
                               "learners": {"player_1": {"learner": "dqn", "options": {"lr": 0.001}}}})
    return rd


# ------------------------------------------------------------------------------------------ the option
def test_the_tracker_option_reads_alike_from_python_toml_and_the_command_line(tmp_path):
    assert RunConfig().tracker == (), "TensorBoard alone, where installed, as before"
    assert RunConfig(tracker="wandb, mlflow,wandb", out_dir="x").validate().tracker == ("wandb", "mlflow")
    assert RunConfig(tracker=["mlflow"], out_dir="x").validate().tracker == ("mlflow",)
    assert RunConfig.toml_values('[run]\ntracker = ["wandb", "mlflow"]\n') == {"tracker": ["wandb", "mlflow"]}
    config = RunConfig(tracker="wandb,mlflow", out_dir=str(tmp_path))
    file = tmp_path / "run.toml"
    file.write_text(config.to_toml())
    assert RunConfig.from_toml(file).tracker == ("wandb", "mlflow")
    assert RunConfig.from_dict(json.loads(json.dumps(config.as_dict()))).tracker == ("wandb", "mlflow"), "run.json"
    assert parse_trackers("wandb,mlflow") == ("wandb", "mlflow") and parse_trackers("none") == ()
    with pytest.raises(ConfigError, match=r"option tracker=\('comet',\): .*'wandb', 'mlflow'.*got 'comet'"):
        RunConfig(tracker="comet", out_dir="x").validate()
    with pytest.raises(ConfigError, match="option tracker=.*give out_dir"):
        RunConfig(tracker="mlflow").validate()
    with pytest.raises(ConfigError, match=r"option tracker='no_such_module:T': cannot load it"):
        check_trackers(("no_such_module:T",))


def test_a_missing_extra_is_one_line_with_the_pip_command_before_anything_runs(tmp_path, monkeypatch):
    from pzasync import extras
    from pzasync.cli import main

    monkeypatch.setitem(extras.EXTRAS, "wandb", ("pzasync_no_such_package",))
    pip_line = r"tracker 'wandb' needs the 'wandb' extra .* pip install \"pzasync\[wandb\]\""
    with pytest.raises(UserInputError, match=pip_line):
        SequentialRunner(TTT, "random", RunConfig(tracker="wandb", out_dir=str(tmp_path)))
    result = CliRunner().invoke(main, ["train", TTT, "--tracker", "wandb", "--steps", "10", "--out", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert 'pip install "pzasync[wandb]"' in result.output and "Traceback" not in result.output
    assert not list(tmp_path.iterdir()), "nothing written"


def test_train_takes_run_options_as_keywords(monkeypatch):
    from pzasync.training import trainer

    made = {}

    class Fake:
        def __init__(self, env, **arguments):
            made.update(arguments, env=env)

        def run(self):
            return "ran"

    monkeypatch.setattr(trainer, "Trainer", Fake)
    assert pzasync.train(TTT, tracker="mlflow", steps=5, options={"seed": 3}) == "ran"
    assert made == {"env": TTT, "steps": 5, "options": {"seed": 3, "tracker": "mlflow"}}


# ------------------------------------------------------------------------------------------ the seam
def test_the_seam_gets_the_scalars_tensorboard_gets_under_the_same_names(tmp_path):
    pytest.importorskip("tensorboard", reason="the `tensorboard` extra (pip install 'pzasync[tensorboard]')")
    rd = _new_run_dir(tmp_path)
    rd.open_trackers([RECORDING])
    assert rd.tracker.names == ["tensorboard", RECORDING], "TensorBoard beside any tracker, named or not"
    recording = RecordingTracker.opened[0]
    assert recording.run.name == rd.path.name and recording.run.directory == rd.path
    assert recording.run.params["learners"]["player_1"]["options"] == {"lr": 0.001}, "run.json, the parameters"
    rd.tracker.log_metrics("players", 5, {"loss": 0.5, "q_mean": 1.25, "note": "text is not a scalar"})
    rd.tracker.log_metrics("players", 10, {"loss": 0.25, "q_mean": 1.5})
    rd.tracker.log_eval({"kind": "eval", "agent": "player_1", "opponent": "perfect", "outcomes": True,
                         "win_rate": 0.25, "mean_return": -0.5, "agent_steps": 400})
    rd.tracker.log_eval({"kind": "eval", "agent": "agent_0", "opponent": "random", "outcomes": False,
                         "win_rate": 0.0, "mean_return": -80.0, "agent_steps": 400})
    rd.tracker.log_eval({"kind": "eval", "agent": "player_0", "opponent": "random", "outcomes": True,
                         "win_rate": 0.5, "mean_return": 0.0, "exploitability": 1.5, "agent_steps": 800})
    rd.close()
    expected = {("players/loss", 5, 0.5), ("players/q_mean", 5, 1.25), ("players/loss", 10, 0.25),
                ("players/q_mean", 10, 1.5), ("eval/player_1/win_rate_vs_perfect", 400, 0.25),
                ("eval/agent_0/mean_return", 400, -80.0), ("eval/player_0/win_rate", 800, 0.5),
                ("eval/player_0/exploitability", 800, 1.5)}
    assert _tensorboard_scalars(rd.path / "tb") == expected
    assert recording.metrics[0] == ("players", 5, {"loss": 0.5, "q_mean": 1.25, "note": "text is not a scalar"})
    assert recording.scalars() == expected and recording.closed == [FINISHED]
    rd.close()
    assert recording.closed == [FINISHED], "closed once"


def test_a_failing_tracker_is_one_warning_and_the_others_go_on(capsys):
    good, broken = RecordingTracker(None), BrokenTracker(None)
    trackers = Trackers({"broken": broken, "good": good})
    row = {"agent": "a", "outcomes": True, "win_rate": 1.0, "agent_steps": 1}
    for _ in range(3):
        trackers.log_eval(row)
        trackers.log_metrics("a", 1, {"loss": 1.0})
    trackers.close()
    assert capsys.readouterr().err.splitlines() == [
        "pzasync: tracker 'broken' failed to log an evaluation row (OSError: disk full); the run goes on without it"]
    assert broken.closed == [FAILED] and not broken.metrics, "closed and dropped at its failure"
    assert len(good.evals) == 3 and len(good.metrics) == 3 and good.closed == [FINISHED]


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_run_hands_the_seam_the_reports_and_evaluation_rows_it_writes(tmp_path):
    from pzasync.runners import AsyncRunner

    config = RunConfig(out_dir=str(tmp_path), tracker=RECORDING, seed=0, eval_vs="random", eval_every_s=1.0,
                       eval_episodes=10)
    result = AsyncRunner(TTT, {"player_1": "dqn", "player_2": "random"}, config).run(seconds=8)
    (recording,) = RecordingTracker.opened
    rd = RunDirectory(result.run_dir, create=False)
    assert recording.run.params == rd.read_json("run.json") and recording.run.name == Path(result.run_dir).name
    rows = rd.read_jsonl("metrics.jsonl")
    reports = [(r["agent"], r["updates"], r["metrics"]) for r in rows if r.get("kind") != "eval"]
    assert len(reports) >= 2 and reports == recording.metrics
    evals = [r for r in rows if r.get("kind") == "eval"]
    assert evals and evals == recording.evals
    if (rd.path / "tb").exists():  # the `tensorboard` extra: the same scalars there
        assert _tensorboard_scalars(rd.path / "tb") == as_float32(recording.scalars())
    plots = {"returns.png", "eval.png"} if (rd.path / "returns.png").exists() else set()  # the `plot` extra
    assert {p.name for p in recording.files} == {"result.json", *plots} and recording.closed == [FINISHED]


def test_a_run_closes_its_trackers_however_it_ends(tmp_path, monkeypatch):
    from pzasync.runtime.actor import Actor

    config = RunConfig(out_dir=str(tmp_path), tracker=RECORDING, seed=0)
    SequentialRunner(TTT, "random", config).run(agent_steps=50)
    assert RecordingTracker.opened[0].closed == [FINISHED]

    def boom(*_, **__):
        raise RuntimeError("the env broke")

    monkeypatch.setattr(Actor, "run", boom)
    with pytest.raises(RuntimeError, match="the env broke"):
        SequentialRunner(TTT, "random", config).run(agent_steps=50)
    assert RecordingTracker.opened[1].closed == [FAILED]

    def interrupted(*_, **__):
        raise KeyboardInterrupt

    monkeypatch.setattr(SequentialRunner, "_run_parts", interrupted)
    with pytest.raises(KeyboardInterrupt):
        SequentialRunner(TTT, "random", config).run(agent_steps=50)
    assert RecordingTracker.opened[2].closed == [KILLED]


@pytest.mark.slow
def test_the_final_evaluation_goes_to_the_run_directory_and_the_trackers_before_they_close(tmp_path, monkeypatch):
    from pzasync.training import Trainer
    from pzasync.training.trainer import FINAL_EVALUATION_FILE

    result = pzasync.train(TTT, steps=300, runner="sequential", final_episodes=4, learner="dqn",
                           options={"out_dir": str(tmp_path), "tracker": RECORDING, "eval_every_s": 0})
    (recording,) = RecordingTracker.opened
    assert recording.closed == [FINISHED], "closed once, after the final evaluation"
    final = [(step, metrics) for unit, step, metrics in recording.metrics if unit == "final"]
    assert len(final) == 1 and final[0][0] == result.run.agent_steps
    scores = final[0][1]
    yardstick = result.evaluation.results[0].opponent
    assert {r.opponent for r in result.evaluation.results} == {yardstick, "random"}
    for r in result.evaluation.results:  # tictactoe's returns are game results: win rates
        assert scores[f"{r.agent}/{r.policy}/win_rate" + ("" if r.opponent == yardstick else "_vs_random")] \
            == r.win_rate
    assert len(scores) == len(result.evaluation.results)
    written = json.loads((Path(result.run.run_dir) / FINAL_EVALUATION_FILE).read_text())
    assert written == json.loads(json.dumps(result.evaluation.to_json()))
    assert FINAL_EVALUATION_FILE in {p.name for p in recording.files}

    def broken(*_, **__):
        raise RuntimeError("the evaluation broke")

    monkeypatch.setattr(Trainer, "final_evaluation", broken)
    with pytest.raises(RuntimeError, match="the evaluation broke"):
        pzasync.train(TTT, steps=300, runner="sequential", final_episodes=4, learner="dqn",
                      options={"out_dir": str(tmp_path), "tracker": RECORDING, "eval_every_s": 0})
    assert RecordingTracker.opened[1].closed == [FAILED], "a final evaluation that fails closes them as failed"


def test_parameters_flatten_for_trackers_whose_parameters_are_flat():
    assert flat_params({"config": {"seed": 0, "devices": {}}, "learners": {"p": {"options": {"lr": 0.1}}}}) == {
        "config.seed": 0, "config.devices": {}, "learners.p.options.lr": 0.1}


# ------------------------------------------------------------------------------------------ real trackers
def wandb_services(parent: int) -> list[int]:
    """Live W&B service processes (wandb-core, started with --pid PARENT) of process `parent`."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            args = (proc / "cmdline").read_bytes().split(b"\0")
            state = (proc / "status").read_text()
        except OSError:
            continue
        if (args and b"wandb-core" in args[0] and b"--pid" in args and "State:\tZ" not in state
                and args[args.index(b"--pid") + 1] == str(parent).encode()):
            found.append(int(proc.name))
    return found


def wandb_records(run_dir: Path) -> list:
    """The records of a run's offline W&B file (RUN_DIR/wandb/offline-run-*/run-*.wandb). W&B reads them only in
    its Go service; the file is a LevelDB-style log (a 7-byte header ':W&B', magic, version; 32 KiB blocks of
    chunks, each a 7-byte header: CRC32, length, kind 1 full / 2 first / 3 middle / 4 last) of protobuf `Record`s,
    which wandb.proto parses."""
    from wandb.proto import wandb_internal_pb2

    (file,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    data = file.read_bytes()
    assert data[:4] == b":W&B"
    records, pending, pos, block = [], b"", 7, 32768
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0:  # zero padding to the end of the block
            pos += block - pos % block
            continue
        pending += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def wandb_history(records: list) -> list[dict]:
    return [{item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in r.history.item}
            for r in records if r.WhichOneof("record_type") == "history"]


def mlflow_run(run_dir: Path):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=(run_dir / "mlruns").resolve().as_uri())
    (run,) = client.search_runs([client.get_experiment_by_name("pzasync").experiment_id])
    return client, run


@pytest.fixture
def offline(monkeypatch):
    """No W&B or MLflow configuration from the machine: the defaults, offline, in the run directory."""
    for name in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_PROJECT", "MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NETRC", "/nonexistent/netrc")  # no `wandb login` key either
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # what the tracker sets for its store, for the reading


def _short_train(tmp_path: Path, tracker: str):
    return pzasync.train(TTT, tracker=tracker, steps=12_000, final_episodes=0, out_dir=str(tmp_path),
                         eval_every_s=2.0, eval_episodes=10, envs_per_actor=4)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_wandb_offline_run_holds_the_metrics_the_run_wrote_and_no_service_is_left(tmp_path, offline):
    pytest.importorskip("wandb", reason="the `wandb` extra (pip install 'pzasync[wandb]')")
    result = _short_train(tmp_path, "wandb")
    assert not wandb_services(os.getpid()), "the W&B service process outlived the run"
    run_dir = Path(result.run_dir)
    records = wandb_records(run_dir)
    (run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert run.display_name == run_dir.name and run.project == "pzasync"
    config = {u.key: json.loads(u.value_json) for u in run.config.update}
    assert config["config"]["seed"] == 0 and config["config"]["tracker"] == ["wandb"]
    assert config["learners"]["player_1"]["learner"].endswith("DQNLearner")
    history = wandb_history(records)
    reports = [r for r in RunDirectory(run_dir, create=False).read_jsonl("metrics.jsonl") if r.get("kind") != "eval"]
    logged = [(h["players/updates"], h["players/loss"]) for h in history if "players/loss" in h]
    assert logged == [(r["updates"], pytest.approx(r["metrics"]["loss"])) for r in reports if "loss" in r["metrics"]]
    assert logged[-1][0] > logged[0][0] > 0
    evals = [h for h in history if any(k.startswith("eval/") for k in h)]
    assert evals and all(0 <= v <= 1 for h in evals for k, v in h.items() if k.startswith("eval/"))
    images = {k.rsplit("/", 1)[0] for h in history for k, v in h.items() if k.endswith("/_type") and v == "image-file"}
    assert images >= {"plots/returns", "plots/eval"}, "the plots, as images"
    (exit_record,) = [r.exit for r in records if r.WhichOneof("record_type") == "exit"]
    assert exit_record.exit_code == 0


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_mlflow_file_store_holds_the_params_metrics_and_plots_of_the_run(tmp_path, offline):
    pytest.importorskip("mlflow", reason="the `mlflow` extra (pip install 'pzasync[mlflow]')")
    result = _short_train(tmp_path, "mlflow")
    run_dir = Path(result.run_dir)
    client, run = mlflow_run(run_dir)
    assert run.info.run_name == run_dir.name and run.info.status == "FINISHED"
    params = run.data.params
    assert params["config.seed"] == "0" and params["config.tracker"] == '["mlflow"]' and params["env"] == TTT
    assert params["learners.player_1.learner"].endswith("DQNLearner")
    history = client.get_metric_history(run.info.run_id, "players/loss")
    steps = [m.step for m in history]
    assert len(steps) >= 2 and steps == sorted(steps) and 0 < steps[-1] <= result.run.agents["player_1"].updates
    assert all(m.value >= 0 for m in history), "a squared TD error"
    evals = {k: v for k, v in run.data.metrics.items() if k.startswith("eval/")}
    assert set(evals) == {"eval/player_1/win_rate_vs_perfect", "eval/player_2/win_rate_vs_perfect"}
    assert all(0 <= v <= 1 for v in evals.values())
    assert {a.path for a in client.list_artifacts(run.info.run_id, "plots")} >= {"plots/returns.png",
                                                                                  "plots/eval.png"}
    assert "result.json" in {a.path for a in client.list_artifacts(run.info.run_id)}


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_ctrl_c_closes_the_trackers_and_leaves_no_process(tmp_path, offline):
    from test_stopping import TrainRun

    trackers = [name for name in ("wandb", "mlflow") if __import__("importlib").util.find_spec(name)]
    if not trackers:
        pytest.skip("neither the `wandb` nor the `mlflow` extra is installed")
    run = TrainRun(tmp_path, TTT, "--minutes", "2", "--tracker", ",".join(trackers), "--eval-every", "2")
    try:
        run.wait_until_acting()
        time.sleep(2)
        code, _took, out, err = run.signal_group(signal.SIGINT)
    finally:
        run.kill()
    assert code == 128 + signal.SIGINT, err[-3000:]
    run.assert_nothing_left()
    (run_dir,) = tmp_path.iterdir()
    if "wandb" in trackers:
        deadline = time.monotonic() + 10
        while wandb_services(run.proc.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not wandb_services(run.proc.pid), "the W&B service process outlived the run"
        (exit_record,) = [r.exit for r in wandb_records(run_dir) if r.WhichOneof("record_type") == "exit"]
        assert exit_record.exit_code == 1, "finished as stopped early"
    if "mlflow" in trackers:
        _client, mlrun = mlflow_run(run_dir)
        assert mlrun.info.status == "KILLED" and "players/loss" in mlrun.data.metrics
    assert "pzasync: tracker" not in err, err[-3000:]
