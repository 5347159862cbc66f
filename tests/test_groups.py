"""Agent groups (parameter sharing): several agents, one learner, one buffer, one slot; every transition
attributed to the member that made it."""

from __future__ import annotations

import glob

import numpy as np
import pytest
import torch

from pzasync import AsyncRunner, RunConfig, SequentialRunner
from pzasync.core.spaces import env_layouts
from pzasync.errors import ConfigError
from pzasync.learners import LearnerContext
from pzasync.learners.ppo import PPOLearner
from pzasync.runtime.plan import RunPlan
from pzasync.transport import stats as S

SCRIPTED = "tests.scripted_env:env"
RECORDING = "tests.custom_learners:RecordingLearner"


def recorded_batches(record_dir) -> list[dict[str, np.ndarray]]:
    return [dict(np.load(path)) for path in sorted(glob.glob(f"{record_dir}/*.npz"))]


@pytest.mark.parametrize("runner_cls", [AsyncRunner, SequentialRunner])
def test_a_group_shares_one_learner_that_sees_each_members_transitions_attributed(runner_cls, tmp_path):
    config = RunConfig(seed=0, agent_groups={"both": ["p*"]}, backpressure=True)
    learners = {"both": (RECORDING, {"record_dir": str(tmp_path), "batch_size": 6})}
    run = runner_cls(SCRIPTED, learners, config)
    assert [p.agent for p in run.plan.learning] == ["both"]  # one learner for the two agents
    result = run.run(agent_steps=120)
    batches = recorded_batches(tmp_path)
    assert batches and all(path.split("/")[-1].startswith("both-") for path in glob.glob(f"{tmp_path}/*.npz"))
    rows = {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}
    # The scripted env puts the agent's index in obs[1]; members are numbered in env order (p0 = 0, p1 = 1).
    np.testing.assert_array_equal(rows["member"], rows["obs"][:, 1])
    assert set(rows["member"].tolist()) == {0, 1}
    # Per member, transitions are in its own order: its decision counter (obs[0]) steps 0,1,2,.. per episode.
    for member, decisions in ((0, 4), (1, 2)):
        own = rows["obs"][rows["member"] == member, 0]
        assert own.tolist() == list(np.arange(len(own)) % decisions)
        # p1 is terminated (-100 on its 2nd decision): only its own transitions carry that
        dead = rows["terminated"][rows["member"] == member]
        assert dead.any() == (member == 1)
    # Members pay what docs/transitions.md (rule 2) says: p1's 2nd decision is its terminal -100 (+ its action),
    # never p0's.
    p1_last = (rows["member"] == 1) & (rows["obs"][:, 0] == 1)
    assert (rows["reward"][p1_last] <= -99).all()
    assert (rows["reward"][rows["member"] == 0] >= 0).all()
    assert {r.group for r in result.agents.values()} == {"both"}
    assert result.agents["p0"].updates == result.agents["p1"].updates == len(batches)
    assert result.agents["p0"].transitions_written + result.agents["p1"].transitions_written == 120


def test_grouped_and_own_learners_side_by_side(tmp_path):
    plan = RunPlan("pzasync.envs.forage", {"pack": "dqn", "forager_2": "random"},
                   RunConfig(agent_groups={"pack": ["forager_0", "forager_1"]}))
    assert sorted(plan.units) == ["forager_2", "pack"] and [p.agent for p in plan.learning] == ["pack"]
    assert plan.units["pack"].members == ["forager_0", "forager_1"]
    assert (plan.agents["forager_1"].unit, plan.agents["forager_1"].member) == ("pack", 1)
    plan.allocate()
    try:
        assert plan.agents["forager_0"].buffer is plan.agents["forager_1"].buffer is plan.units["pack"].buffer
        assert plan.agents["forager_0"].slot is plan.units["pack"].slot
        assert plan.agents["forager_2"].buffer is None
    finally:
        plan.release()


@pytest.mark.slow  # 3.5 s; grouped runs train by default in test_compat.py (KAZ) and test_suite.py
def test_a_grouped_dqn_run_trains_and_reports_per_member(tmp_path):
    config = RunConfig(seed=1, agent_groups={"pack": ["forager_*"]}, out_dir=str(tmp_path), replay_ratio=0.25)
    result = AsyncRunner("pzasync.envs.forage", ("dqn", {"learning_starts": 100}), config).run(agent_steps=1500)
    updates = {r.updates for r in result.agents.values()}
    assert len(updates) == 1 and updates.pop() > 50
    assert sum(r.transitions_written for r in result.agents.values()) == 1500
    assert (tmp_path / result.run_dir.split("/")[-1] / "checkpoints" / "pack.pt").exists()
    from pzasync.evaluation.evaluate import load_run_policies

    assert sorted(load_run_policies(result.run_dir)) == ["forager_0", "forager_1", "forager_2"]


def test_a_group_is_planned_once_not_once_per_member(monkeypatch):
    """The plan resolves, checks and sizes a group's learner on one member (they share its spec and spaces):
    planning hundreds of agents in two groups builds two policies, not hundreds."""
    from pzasync.learners.dqn import DQNLearner

    built, checked = [], []
    build, validate = DQNLearner.build_policy.__func__, DQNLearner.validate_config.__func__
    monkeypatch.setattr(DQNLearner, "build_policy", classmethod(
        lambda cls, layout, options: built.append(layout.agent) or build(cls, layout, options)))
    monkeypatch.setattr(DQNLearner, "validate_config", classmethod(
        lambda cls, agent, options: checked.append(agent) or validate(cls, agent, options)))
    plan = RunPlan("pzasync.envs.forage", {"pack": ("dqn", {"hidden": [16]}), "forager_2": "dqn"},
                   RunConfig(agent_groups={"pack": ["forager_0", "forager_1"]}))
    assert built == ["forager_0", "forager_2"] and checked == ["forager_0", "forager_2"]
    assert plan.agents["forager_1"].policy_floats == plan.units["pack"].policy_floats
    assert plan.units["pack"].policy_floats < plan.units["forager_2"].policy_floats, "each unit its own size"
    assert plan.agents["forager_1"].options == plan.units["pack"].options
    assert plan.units["pack"].options["hidden"] == [16]


@pytest.mark.parametrize("groups, learners, message", [
    ({"g": ["nobody_*"]}, "dqn", r"agent group 'g': 'nobody_\*' matches none of the env's agents"),
    ({"g": ["forager_0"], "h": ["forager_*"]}, "dqn", r"agent 'forager_0' is in two agent groups, 'g' and 'h'"),
    ({"forager_0": ["forager_1"]}, "dqn", r"agent group 'forager_0' has the name of one of the env's agents"),
    ({"g": ["forager_0", "forager_1"]}, {"forager_0": "dqn", "*": "random"},
     r"agent\(s\) \['forager_0'\] are in agent group\(s\) \['g'\]: give the learner under the group's name"),
    ({"g": []}, "dqn", r"option agent_groups: group 'g' needs a non-empty list"),
])
def test_bad_groups_are_refused_with_the_reason(groups, learners, message):
    with pytest.raises(ConfigError, match=message):
        RunPlan("pzasync.envs.forage", learners, RunConfig(agent_groups=groups))


def test_members_with_different_spaces_cannot_share_a_policy():
    pytest.importorskip("mpe2")
    with pytest.raises(ConfigError, match=r"agent group 'all': 'adversary_0' and 'agent_0' have different "
                                          r"observation spaces .* supersuit.pad_observations_v0"):
        RunPlan("mpe2.simple_tag_v3", "dqn", RunConfig(agent_groups={"all": ["*"]}))


def test_ppo_advantages_run_per_member_when_members_interleave():
    from pzasync.core.environments import make_env

    env = make_env(SCRIPTED)
    layout = env_layouts(env)["p0"]
    learner = PPOLearner(LearnerContext("g", layout, PPOLearner.validate_config("g", {"batch_size": 6}),
                                        members=["p0", "p1"]))
    rng = np.random.default_rng(0)
    n = 6
    batch = {"obs": rng.random((n, 2)).astype(np.float32), "next_obs": rng.random((n, 2)).astype(np.float32),
             "reward": rng.random(n).astype(np.float32), "terminated": np.zeros(n, bool),
             "truncated": np.zeros(n, bool), "member": np.array([0, 1, 0, 1, 0, 1], np.int16)}
    together, _ = learner.compute_advantages(batch)
    for m in (0, 1):
        rows = batch["member"] == m
        alone, _ = learner.compute_advantages({k: v[rows] for k, v in batch.items() if k != "member"})
        torch.testing.assert_close(together[torch.as_tensor(rows)], alone)
    mixed, _ = learner.compute_advantages({k: v for k, v in batch.items() if k != "member"})
    assert not torch.allclose(mixed, together), "without member ids the trajectories would be mixed up"


@pytest.mark.parametrize("members, label", [
    ([f"red_{i}" for i in range(81)], "red_0..red_80 (81 agents)"),
    ([f"red_{i}" for i in range(3)] + [f"blue_{i}" for i in range(3)], "red_0..red_2, blue_0..blue_2 (6 agents)"),
    (["player_1", "player_2"], "player_1, player_2 (2 agents)"),  # two in a row are named, not a range
    (["a_0", "a_1", "a_2", "a_4", "a_5", "a_6", "a_9"], "a_0..a_2, a_4..a_6, a_9 (7 agents)"),
    (["north", "south", "east", "west", "up", "down"], "north, south, east, west, … (6 agents)"),
    ([f"red_{i}" for i in range(0, 20, 2)], "red_0, red_2, red_4, red_6, … (10 agents)"),
    (["a_8", "a_9", "a_10", "a_11"], "a_8..a_11 (4 agents)"),
    (["a_08", "a_09", "a_10"], "a_08, a_09, a_10 (3 agents)"),  # a leading zero is part of the name
    (["1", "2", "3"], "1..3 (3 agents)"),
    (["red_3", "red_2", "red_1"], "red_3, red_2, red_1 (3 agents)"),  # the order given is kept
    (["agent_0"], "agent_0"),
    ([], ""),
])
def test_members_label_names_a_group_in_one_short_piece(members, label):
    from pzasync.core.groups import members_label

    assert members_label(members) == label


def test_units_in_order_keeps_env_order_with_each_unit_at_its_first_agent():
    from pzasync.core.groups import units_in_order

    unit_of = {"agent_0": "agent_0", "red_0": "red", "blue_0": "blue", "red_1": "red", "agent_1": "agent_1"}
    assert units_in_order(unit_of) == {"agent_0": ["agent_0"], "red": ["red_0", "red_1"], "blue": ["blue_0"],
                                       "agent_1": ["agent_1"]}


def test_the_live_table_has_one_row_per_learning_unit_with_its_members_latest_returns():
    """A group's row: its members' short name, its learner, the mean of its members' latest 100 episode returns;
    an agent alone keeps a row of its own."""
    import time

    from rich.console import Console

    from pzasync.core.transitions import EpisodeSummary
    from pzasync.runtime.monitor import RunMonitor

    pytest.importorskip("mpe2")
    plan = RunPlan("mpe2.simple_tag_v3", "dqn", RunConfig(agent_groups={"adversary": ["adversary_*"]}))
    monitor = RunMonitor(plan, None, False, None, time.monotonic())
    for index in range(50):  # 150 member returns: 10 apiece in episodes 0-16, 1 apiece after (the last 100)
        returns = {f"adversary_{i}": 10.0 if index < 17 else float(i) for i in range(3)}
        monitor.episode(EpisodeSummary(index, {**returns, "agent_0": -2.0 - index % 2}, 4, False))
    plan.allocate()  # the unit's counters: a group's updates and version are its learner's
    try:
        plan.stats.set("adversary", S.UPDATES, 1234)
        plan.stats.set("adversary", S.VERSION, 56)
        monitor.record_report("adversary", {"updates": 1234, "lag_mean": 1.5, "lag_p95": 3.0}, log=False)
        table = monitor._table()
    finally:
        plan.release()
    assert table.row_count == 2
    console = Console(record=True, width=200)
    console.print(table)
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in console.export_text().splitlines()
            if line.startswith("│")]
    # 100 member returns: adversary_2's of episode 16 (10), then episodes 17-49's 0, 1, 2: (10 + 33*3) / 100
    assert rows == [["adversary_0..adversary_2 (3 agents)", "dqn (adversary)", "+1.090", "1,234", "56", "1.5/3",
                     "starting"],
                    ["agent_0", "dqn", "-2.500", "0", "0", "0.0/0", "starting"]]


def test_the_returns_plot_draws_a_group_as_one_line_of_its_members_mean(tmp_path):
    """returns.png (and eval.png's training panel): one line per learning unit, a group's its members' mean return
    in each episode under their short name, so 162 agents make two lines, not 162 (and a legend that fits)."""
    from pzasync.runtime.rundir import RunDirectory, draw_returns, returns_units

    run_dir = RunDirectory(tmp_path)
    run_dir.write_json("run.json", {"config": {"agent_groups": {"red": ["red_*"]}}})
    red = [f"red_{i}" for i in range(12)]  # red_10 sorts before red_2: the env's order is kept
    rows = [{"wall_s": float(e), "returns": {"red_0": e, "red_1": 3.0 * e, **dict.fromkeys(red[2:], 2.0),
                                             "agent_0": -e}} for e in range(4)]
    units = returns_units(run_dir, rows)
    assert list(units.items()) == [("red", red), ("agent_0", ["agent_0"])]

    class Axes:
        lines: list = []

        def plot(self, x, y, **style):
            self.lines.append((style["label"], list(x), list(y)))

    ax = Axes()
    draw_returns(ax, rows, units=units)
    assert ax.lines == [("red_0..red_11 (12 agents), group red", [0.0, 1.0, 2.0, 3.0],
                         [(e + 3.0 * e + 10 * 2.0) / 12 for e in range(4)]),
                        ("agent_0", [0.0, 1.0, 2.0, 3.0], [0.0, -1.0, -2.0, -3.0])]
    assert returns_units(RunDirectory(tmp_path / "elsewhere"), rows) == {a: [a] for a in rows[0]["returns"]}
