"""benchmarks/peers/player.py: a peer's TorchScript policy scored by pzasync's evaluator (docs/benchmarks.md
"The peers"). The modules here are tiny ones made in the test with torch; no peer library."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch

import pzasync
from pzasync.errors import ConfigError

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")

SPREAD = "mpe2.simple_spread_v3"
PLAYER = Path(__file__).parents[1] / "benchmarks" / "peers" / "player.py"


@pytest.fixture(scope="module")
def player():
    spec = importlib.util.spec_from_file_location("peer_player", PLAYER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def export(path: Path, module: torch.nn.Module, obs_size: int, actions: int, **box: list) -> Path:
    """Save `module` as the peers do: traced TorchScript with peer.json beside it (`box`: the action_shape, low
    and high of a module that gives a Box action's mean)."""
    traced = torch.jit.trace(module.eval(), torch.zeros(2, obs_size))
    meta = {"obs_shape": [obs_size], "actions": actions, "output": "logits"} if not box else \
        {"obs_shape": [obs_size], "output": "mean", **box}
    torch.jit.save(traced, str(path), _extra_files={"peer.json": json.dumps(meta)})
    return path


def constant(action: int, obs_size: int = 18, actions: int = 5) -> torch.nn.Module:
    """A linear module whose logits always favour `action`."""
    layer = torch.nn.Linear(obs_size, actions)
    with torch.no_grad():
        layer.weight.zero_()
        layer.bias.copy_(torch.arange(actions) == action)
    return layer


def test_every_agent_gets_the_same_policy_which_acts_on_the_argmax_of_the_modules_logits(player, tmp_path):
    torch.manual_seed(0)
    layer = torch.nn.Linear(18, 5)
    policies = player.peer_policies(export(tmp_path / "p.pt", layer, 18, 5), SPREAD)
    assert sorted(policies) == ["agent_0", "agent_1", "agent_2"]
    assert len({id(policy) for policy, _layout in policies.values()}) == 1
    obs = np.random.default_rng(1).normal(size=(64, 18)).astype(np.float32)
    actions, extras = policies["agent_0"][0].act({"obs": obs}, None, False)
    with torch.no_grad():
        expected = layer(torch.from_numpy(obs)).argmax(dim=1).numpy()
    assert extras == {} and actions.dtype == np.int64
    np.testing.assert_array_equal(actions, expected)


def test_masked_out_actions_are_never_chosen_greedy_or_sampled(player, tmp_path):
    policy = player.TorchScriptPolicy(export(tmp_path / "p.pt", constant(2), 18, 5))
    mask = np.ones((200, 5), bool)
    mask[:, 2] = False
    obs = {"obs": np.zeros((200, 18), np.float32)}
    greedy, _ = policy.act(obs, mask, False)
    policy.seed(3)
    sampled, _ = policy.act(obs, mask, True)
    assert set(greedy.tolist()) == {0} and 2 not in set(sampled.tolist())
    assert len(set(sampled.tolist())) > 1


def test_a_module_exported_for_other_spaces_is_refused_naming_the_agent(player, tmp_path):
    path = export(tmp_path / "p.pt", constant(0, obs_size=7), 7, 5)
    with pytest.raises(ConfigError, match="agent 'agent_0': observation shape \\(18,\\)"):
        player.peer_policies(path, SPREAD)


def test_peer_policy_as_a_player_spec_reads_its_file_from_the_environment(player, tmp_path, monkeypatch):
    layout = next(iter(player.peer_policies(export(tmp_path / "p.pt", constant(4), 18, 5), SPREAD).values()))[1]
    monkeypatch.delenv(player.POLICY_VARIABLE, raising=False)
    with pytest.raises(ConfigError, match=player.POLICY_VARIABLE):
        player.PeerPolicy(layout)
    monkeypatch.setenv(player.POLICY_VARIABLE, str(tmp_path / "p.pt"))
    actions, _ = player.PeerPolicy(layout).act({"obs": np.zeros((3, 18), np.float32)}, None, False)
    assert actions.tolist() == [4, 4, 4]


def test_evaluate_scores_the_peer_as_a_team_with_the_returns_of_playing_its_actions_by_hand(player, tmp_path):
    """Every agent always moves right (action 2): pzasync's team return equals the summed rewards of the same
    seeded episodes played by hand on the parallel env."""
    policies = player.peer_policies(export(tmp_path / "p.pt", constant(2), 18, 5), SPREAD)
    report = pzasync.evaluate(policies, env=SPREAD, episodes=3, seed=40, baselines=False, copies=2)
    assert report.scoring == "team"
    from mpe2 import simple_spread_v3

    by_hand = []
    for episode in range(3):
        env = simple_spread_v3.parallel_env()
        env.reset(seed=40 + episode)
        total = 0.0
        while env.agents:
            _obs, rewards, *_ = env.step(dict.fromkeys(env.agents, 2))
            total += sum(rewards.values())
        env.close()
        by_hand.append(total)
    np.testing.assert_allclose(report.result("team").returns, by_hand, rtol=1e-5)


def test_a_box_action_is_the_modules_mean_clipped_to_the_bounds_and_its_shape_is_checked(player, tmp_path):
    continuous = pzasync.EnvSpec.of(SPREAD, continuous_actions=True)  # Box(0, 1, (5,)) actions
    layer = torch.nn.Linear(18, 5)
    with torch.no_grad():
        layer.weight.zero_()
        layer.bias.copy_(torch.tensor([2.0, -1.0, 0.25, 0.5, 0.75]))
    box = {"action_shape": [5], "low": [0.0] * 5, "high": [1.0] * 5}
    policies = player.peer_policies(export(tmp_path / "p.pt", layer, 18, 5, **box), continuous)
    actions, _ = policies["agent_1"][0].act({"obs": np.zeros((2, 18), np.float32)}, None, False)
    np.testing.assert_allclose(actions, [[1.0, 0.0, 0.25, 0.5, 0.75]] * 2)
    wrong = export(tmp_path / "q.pt", torch.nn.Linear(18, 3), 18, 3, action_shape=[3], low=[0.0] * 3,
                   high=[1.0] * 3)
    with pytest.raises(ConfigError, match="agent 'agent_0': action space Box"):
        player.peer_policies(wrong, continuous)
    with pytest.raises(ConfigError, match="without its log_std"):
        policies["agent_1"][0].act({"obs": np.zeros((2, 18), np.float32)}, None, True)


def test_a_box_action_sampled_is_drawn_around_the_mean_with_the_exported_spread(player, tmp_path):
    continuous = pzasync.EnvSpec.of(SPREAD, continuous_actions=True)
    layer = torch.nn.Linear(18, 5)
    with torch.no_grad():
        layer.weight.zero_()
        layer.bias.copy_(torch.tensor([0.5, 0.5, 0.5, 0.5, 2.0]))
    box = {"action_shape": [5], "low": [0.0] * 5, "high": [1.0] * 5, "log_std": [np.log(0.1)] * 4 + [0.0]}
    policy = player.peer_policies(export(tmp_path / "p.pt", layer, 18, 5, **box), continuous)["agent_0"][0]
    policy.seed(4)
    actions, _ = policy.act({"obs": np.zeros((4000, 18), np.float32)}, None, True)
    assert actions.min() >= 0.0 and actions.max() <= 1.0, "clipped to the bounds"
    np.testing.assert_allclose(actions[:, :4].mean(axis=0), 0.5, atol=0.01)
    np.testing.assert_allclose(actions[:, :4].std(axis=0), 0.1, atol=0.01)
    assert abs((actions[:, 4] < 1.0).mean() - 0.1587) < 0.02, "a mean of 2, spread 1: below the bound 15.9% of draws"
    policy.seed(4)
    again, _ = policy.act({"obs": np.zeros((4000, 18), np.float32)}, None, True)
    np.testing.assert_array_equal(actions, again)


def test_a_batch_of_seeded_draws_is_what_each_row_would_draw_alone(player, tmp_path):
    """`act_seeded` (the evaluator's sampled scoring): one forward, each row from its own generator, the draws the
    row-at-a-time definition of `pzasync.Policy.act_seeded` gives, for logits (masked) and a Box action."""
    rng = np.random.default_rng(1)
    obs = {"obs": rng.normal(size=(12, 18)).astype(np.float32)}
    seeds = [int(s) for s in rng.integers(2**31, size=12)]
    logits = player.TorchScriptPolicy(export(tmp_path / "d.pt", torch.nn.Linear(18, 5), 18, 5))
    mask = rng.random((12, 5)) < 0.6
    mask[:, 1] = True
    box = {"action_shape": [5], "low": [-1.0] * 5, "high": [1.0] * 5, "log_std": [np.log(0.5)] * 5}
    gaussian = player.TorchScriptPolicy(export(tmp_path / "c.pt", torch.nn.Linear(18, 5), 18, 5, **box))
    for policy, row_mask in ((logits, mask), (gaussian, None)):
        batched, memory = policy.act_seeded(obs, row_mask, seeds)
        alone, _ = pzasync.Policy.act_seeded(policy, obs, row_mask, seeds)
        assert memory is None
        np.testing.assert_allclose(batched, alone, atol=1e-6)
        assert not np.array_equal(policy.act_seeded(obs, row_mask, seeds[::-1])[0], batched)
    assert mask[np.arange(12), logits.act_seeded(obs, mask, seeds)[0]].all(), "an illegal action drawn"


def test_side_by_side_scores_each_peer_seed_from_its_score_files_and_averages_over_seeds(tmp_path):
    """benchmarks/peers/side_by_side.py reads a peer's run folders (run.json, score10.json, score50.json) and gives
    the trained policy's score per seed (random rows, and the trained seat's against random, ignored) and the
    mean with a 95% t interval over seeds."""
    spec = importlib.util.spec_from_file_location("peer_side_by_side", PLAYER.parent / "side_by_side.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    def report(trained: float) -> dict:  # a seat scored against one_ply, with score.py --baselines' extra rows
        return {"env": SPREAD, "vs": "one_ply",
                "results": [{"policy": "trained", "against": "one_ply", "mean_return": trained, "win_rate": 0.0},
                            {"policy": "random", "against": "one_ply", "mean_return": -80.0, "win_rate": 0.0},
                            {"policy": "trained", "against": "random", "mean_return": 90.0, "win_rate": 1.0}]}

    for seed, (at_budget, fifty) in enumerate([(-60.0, -62.0), (-50.0, -52.0), (-70.0, -66.0)]):
        folder = tmp_path / f"peer_s{seed}"
        folder.mkdir()
        (folder / "run.json").write_text(json.dumps({"seed": seed, "agent_steps": 1000 * (seed + 1), "wall_s": 600.5}))
        (folder / "score10.json").write_text(json.dumps(report(at_budget)))
        (folder / "score50.json").write_text(json.dumps(report(fifty)))
        (folder / "score10_sampled.json").write_text(json.dumps(report(at_budget + 100)))
        (folder / "score50_sampled.json").write_text(json.dumps(report(fifty + 100)))
    side = module.summarize(module.peer_side("peer", str(tmp_path / "peer_s*"), "mean_return"))
    assert [r["at_budget"] for r in side["runs"]] == [-60.0, -50.0, -70.0]
    assert side["at_budget"]["mean"] == pytest.approx(-60.0)
    low, high = side["at_budget"]["ci95"]
    assert low == pytest.approx(-60.0 - 4.30 * 10.0 / 3 ** 0.5, abs=0.01) and high > -60.0  # t(2 df) = 4.30
    assert side["episodes_50"]["mean"] == pytest.approx(-60.0)
    sampled = module.summarize(module.peer_side("peer", str(tmp_path / "peer_s*"), "mean_return", "sampled"))
    assert [r["at_budget"] for r in sampled["runs"]] == [40.0, 50.0, 30.0], "the sampled score files"
    with pytest.raises(SystemExit, match="no run folder"):
        module.peer_side("peer", str(tmp_path / "nothing_*"), "mean_return")
