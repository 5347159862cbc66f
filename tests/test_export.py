"""`pzasync export` (evaluation/export.py, learners/acting.py): a run's policies as files that act with torch alone
(torch.export's .pt2) or onnxruntime, no pzasync import. Short real runs of DQN (connect four: masks, both seats one
policy), PPO (Box actions), MAPPO (a critic reading env.state(), one team policy) and a GRU policy (recall) record
over 1,000 decisions of pzasync's own greedy acting (memory carried across steps, reset at episode starts); a fresh
process that cannot import pzasync loads each exported file and must take every one of those actions (Box actions:
equal to float rounding)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

import pzasync
from pzasync import RunConfig, SequentialRunner
from pzasync.core.environments import EnvSpec
from pzasync.core.spaces import env_action_converter, env_layouts, probe_info_masks
from pzasync.errors import ConfigError, UserInputError
from pzasync.evaluation import export as export_module
from pzasync.evaluation.evaluate import load_run_policies, play, policy_actor, run_env
from pzasync.learners.dqn import DQNLearner
from pzasync.learners.ppo import PPOLearner

pytestmark = pytest.mark.timeout(600)

#: Each policy kind: env, its kwargs, learner spec, agent groups, agent steps of training.
KINDS = {
    "dqn": ("pettingzoo.classic.connect_four_v3", {}, ("dqn", {"learning_starts": 300, "batch_size": 32}),
            {"players": ["player_*"]}, 1500),
    "ppo": ("mpe2.simple_spread_v3", {"N": 2, "continuous_actions": True, "max_cycles": 25},
            ("ppo", {"batch_size": 256}), {}, 1500),
    "mappo": ("mpe2.simple_spread_v3", {"N": 3, "max_cycles": 25}, ("mappo", {"batch_size": 256, "state": "env"}),
              {"team": ["agent_*"]}, 1500),
    "gru": ("pzasync.envs.recall", {}, ("ppo", {"memory": "gru", "batch_size": 128, "seq_len": 4}),
            {"team": ["agent_*"]}, 1500),
}
#: Recorded decisions per exported file, at least.
DECISIONS = 1000


def layout_of(env_id, agent, **kwargs):
    env = EnvSpec.of(env_id, **kwargs).make()
    return env_layouts(env, probe_info_masks(env, seed=0))[agent]


# ------------------------------------------------------------------------------- the acting module, in process
def test_the_acting_module_takes_pzasyncs_greedy_actions_and_never_a_masked_one():
    layout = layout_of("pettingzoo.classic.connect_four_v3", "player_0")
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    boards = rng.integers(0, 2, size=(400, 6, 7, 2)).astype(np.int8)
    masks = rng.random((400, 7)) < 0.4
    masks[0] = False  # a row without a legal action: greedy takes action 0, as pzasync does
    for policy in (PPOLearner.build_policy(layout, {}), DQNLearner.build_policy(layout, {})):
        module = policy.acting_module()
        inputs = (torch.as_tensor(boards), torch.as_tensor(masks))
        expected, _ = policy.act({"obs": boards}, masks, False)
        np.testing.assert_array_equal(module(*inputs, torch.tensor(True)).numpy(), expected)
        sampled = np.concatenate([module(*inputs, torch.tensor(False)).numpy() for _ in range(5)])
        legal = np.tile(masks, (5, 1))[np.arange(len(sampled)), sampled]
        assert legal[np.tile(masks.any(axis=1), 5)].all()
        assert (sampled != np.tile(expected, 5)).any()  # sampling is not the greedy choice again
    assert [i["name"] for i in module.inputs()] == ["obs", "action_mask", "greedy"]


def test_export_refuses_bad_input_before_any_work(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="export format 'torchscript'"):
        pzasync.export(tmp_path, format="torchscript")
    with pytest.raises(ConfigError, match="not a pzasync run directory"):
        pzasync.export(tmp_path)
    monkeypatch.setattr("pzasync.extras.missing", lambda extra: ["onnx"] if extra == "export" else [])
    with pytest.raises(UserInputError, match=r"needs the 'export' extra .*pip install \"pzasync\[export\]\""):
        pzasync.export(tmp_path, format="onnx")


def test_a_policy_that_cannot_be_exported_is_named_and_nothing_is_written(tmp_path, monkeypatch):
    from pzasync.learners.players import RandomPolicy

    layout = layout_of("pettingzoo.classic.tictactoe_v3", "player_1")
    (tmp_path / "run.json").write_text(json.dumps({"env": "pettingzoo.classic.tictactoe_v3", "config": {},
                                                   "learners": {"player_1": {"learner": "mypkg:Mine"}}}))
    monkeypatch.setattr(export_module, "load_run_policies",
                        lambda run_dir: {"player_1": (RandomPolicy(layout.action_space), layout)})
    with pytest.raises(ConfigError, match=r"agent 'player_1': its policy \(mypkg:Mine\) cannot be exported"):
        pzasync.export(tmp_path, tmp_path / "out")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


# ------------------------------------------------------------------------ real runs, exported, fresh processes
@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """kind -> its run directory, trained on first use (shared by the formats and the CLI test)."""
    made: dict[str, str] = {}

    def run(kind: str) -> str:
        if kind not in made:
            env, kwargs, learner, groups, steps = KINDS[kind]
            config = RunConfig(seed=3, agent_groups=groups, out_dir=str(tmp_path_factory.mktemp(kind)))
            result = SequentialRunner(EnvSpec.of(env, **kwargs), learner, config).run(agent_steps=steps)
            assert all(r.updates >= 1 for r in result.agents.values()), result.agents
            made[kind] = result.run_dir
        return made[kind]

    return run


def record(run_dir: str, decisions: int = DECISIONS, seed: int = 11) -> dict[str, dict[str, np.ndarray]]:
    """pzasync's own greedy decisions (`policy_actor`, as `pzasync eval` acts) on the env the run's policies act in,
    per exported unit (agents sharing a policy object): observation, mask, agent, whether the agent's episode
    starts there (where a recurrent policy's memory is zeros), the greedy action as the env takes it. The env is
    stepped with a random legal action 30% of the time, so that the games, and the observations, vary."""
    spec = run_env(run_dir)
    policies = load_run_policies(run_dir)
    to_env = env_action_converter({a: layout for a, (_p, layout) in policies.items()})
    unit_of = {a: min(b for b, (q, _l) in policies.items() if q is p) for a, (p, _l) in policies.items()}
    rows: dict[str, list[tuple]] = {u: [] for u in set(unit_of.values())}
    rng = np.random.default_rng(seed)
    actors = {}
    carried = {"memory": None}  # a recurrent policy's memory after its last decision, as pzasync computed it
    for policy, _layout in policies.values():
        if policy.memory_size and "act_with_memory" not in vars(policy):
            def spy(*args, inner=policy.act_with_memory):
                out = inner(*args)
                carried["memory"] = out[2][0].copy()
                return out

            policy.act_with_memory = spy
    for agent, (policy, layout) in policies.items():
        greedy = policy_actor(policy, layout)
        starting = {"now": True}

        def act(a, obs, mask, greedy=greedy, layout=layout, starting=starting):
            action = to_env(a, greedy(a, obs, mask))
            rows[unit_of[a]].append((layout.copy_obs(obs), mask, a, starting["now"], action, carried["memory"]))
            starting["now"] = False
            if rng.random() < 0.3:
                if mask is not None:
                    return int(rng.choice(np.flatnonzero(mask)))
                return layout.action_space.sample()
            return action

        def new_episode(greedy=greedy, starting=starting):
            greedy.new_episode()
            starting["now"] = True

        act.new_episode = new_episode
        actors[agent] = act
    while min(len(r) for r in rows.values()) < decisions:
        play(spec, actors, 10, seed=int(rng.integers(1 << 30)))
    out = {}
    agents = list(policies)
    for unit, unit_rows in rows.items():
        obs, masks, who, starts, actions, memories = zip(*unit_rows)
        out[unit] = {"obs": np.stack(obs), "agent": np.array([agents.index(a) for a in who]),
                     "start": np.array(starts), "action": np.stack([np.asarray(x) for x in actions])}
        if masks[0] is not None:
            out[unit]["mask"] = np.stack(masks)
        if memories[0] is not None:
            out[unit]["memory"] = np.stack(memories)
    return out


#: Run in a fresh `python -I` process: load one exported file without pzasync (its import blocked, and checked
#: to fail) and act on the recorded observations, greedily (memory carried per agent, zeros at episode starts)
#: and sampled; saves the actions.
ACT_ALONE = textwrap.dedent("""
    import json, sys
    sys.modules["pzasync"] = None  # an editable install is on the path: make sure nothing imports it
    try:
        import pzasync
    except ImportError:
        pass
    else:
        raise SystemExit("pzasync is importable")
    import numpy as np
    file, data, out = sys.argv[1:4]
    about = json.load(open(file.rsplit(".", 1)[0] + ".json"))
    names = [i["name"] for i in about["inputs"]]
    recorded = np.load(data)
    if about["format"] == "pt2":
        import torch
        policy = torch.export.load(file).module()
        def call(feed):
            result = policy(*[torch.as_tensor(feed[name]) for name in names])
            return [r.numpy() for r in (result if isinstance(result, tuple) else (result,))]
    else:
        import onnxruntime
        session = onnxruntime.InferenceSession(file)
        def call(feed):
            return session.run(None, feed)
    feed = {"obs": recorded["obs"], "greedy": np.array(True)}
    if about["mask"]:
        feed["action_mask"] = recorded["mask"]
    if about["memory_size"]:
        memory, greedy, memories = {}, [], []
        for i in range(len(recorded["obs"])):
            agent = int(recorded["agent"][i])
            if recorded["start"][i]:
                memory[agent] = np.zeros((1, about["memory_size"]), np.float32)
            row = {k: v[i:i + 1] if k != "greedy" else v for k, v in feed.items()}
            action, memory[agent] = call({**row, "memory": memory[agent]})
            greedy.append(action[0])
            memories.append(memory[agent][0])
        greedy, memories = np.array(greedy), np.array(memories)
        sampled = call({**feed, "memory": np.zeros((len(feed["obs"]), about["memory_size"]), np.float32),
                        "greedy": np.array(False)})[0]
    else:
        greedy, memories = call(feed)[0], np.zeros(0)
        sampled = call({**feed, "greedy": np.array(False)})[0]
    assert not [m for m in sys.modules if m.startswith("pzasync.")]
    np.savez(out, greedy=greedy, sampled=sampled, memory=memories)
""")


def act_alone(file: Path, data: dict[str, np.ndarray], tmp_path: Path) -> dict[str, np.ndarray]:
    np.savez(tmp_path / "recorded.npz", **data)
    (tmp_path / "act_alone.py").write_text(ACT_ALONE)
    done = subprocess.run([sys.executable, "-I", str(tmp_path / "act_alone.py"), str(file),
                           str(tmp_path / "recorded.npz"), str(tmp_path / "acted.npz")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(np.load(tmp_path / "acted.npz"))


@pytest.mark.slow
@pytest.mark.parametrize("file_format", ["pt2", "onnx"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_an_exported_policy_acts_as_pzasync_in_a_process_without_it(kind, file_format, runs, tmp_path):
    if file_format == "onnx":
        pytest.importorskip("onnxscript")
        pytest.importorskip("onnxruntime")
    run_dir = runs(kind)
    recorded = record(run_dir)
    files = pzasync.export(run_dir, tmp_path / "export", format=file_format)
    about = {json.loads(f.with_suffix(".json").read_text())["unit"]: (f, json.loads(f.with_suffix(".json")
                                                                                   .read_text())) for f in files}
    policies = load_run_policies(run_dir)
    assert len(files) == len({id(p) for p, _l in policies.values()})  # one file per learning unit
    for unit, data in recorded.items():
        file, sidecar = next((f, s) for f, s in about.values() if unit in s["agents"])
        assert len(data["obs"]) >= DECISIONS
        layout = policies[unit][1]
        assert sidecar["inputs"][0]["shape"] == [None, *layout.obs_leaves[0].shape]
        assert sidecar["mask"] == ("mask" in data) and sidecar["memory_size"] == policies[unit][0].memory_size
        acted = act_alone(file, data, tmp_path)
        if data["action"].dtype.kind == "f":  # Box actions: pzasync acted one row at a time, the file on a batch,
            # and a matrix product's float rounding depends on the rows beside (here at most 1 ulp)
            np.testing.assert_allclose(acted["greedy"], data["action"], rtol=1e-5, atol=1e-7)
            assert (np.abs(data["action"]) > 1e-3).mean() > 0.1  # the actions are not all clipped to a bound
        else:
            np.testing.assert_array_equal(acted["greedy"], data["action"])
        if "mask" in data:
            assert data["mask"][np.arange(len(data["mask"])), acted["sampled"]].all()
        if kind == "gru":  # the memory each decision carries on, agent by agent, from zeros at episode starts
            assert data["start"].sum() >= 50 and not data["start"].all()  # many episodes, each several steps
            np.testing.assert_allclose(acted["memory"], data["memory"], rtol=1e-5, atol=1e-6)
            assert np.abs(data["memory"]).mean() > 1e-2
    if kind == "mappo":  # the critic read env.state() in training; acting takes only the agent's observation
        assert json.loads((Path(run_dir) / "run.json").read_text())["env_state"]["source"] == "env"
        assert sidecar["inputs"][0]["shape"] == [None, 18] and run_env(run_dir).state is None


@pytest.mark.slow
def test_the_export_command_writes_a_file_and_its_sidecar_per_unit(runs, tmp_path):
    from pzasync.cli import main

    run_dir = runs("mappo")
    result = CliRunner().invoke(main, ["export", run_dir, "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["team.json", "team.pt2"]
    sidecar = json.loads((tmp_path / "out" / "team.json").read_text())
    assert sidecar["agents"] == ["agent_0", "agent_1", "agent_2"] and sidecar["format"] == "pt2"
    assert [i["name"] for i in sidecar["inputs"]] == ["obs", "greedy"] and "team.pt2" in result.output
    bad = CliRunner().invoke(main, ["export", run_dir, "--format", "torchscript"])
    assert bad.exit_code == 2 and "torchscript" in bad.output
