"""Scoring that fits the game: team, seats and sides; `pzasync.evaluate` and `pzasync eval --json` give the same
figures; evaluation over env copies is deterministic for a seed (docs/league.md, "Scoring")."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from click.testing import CliRunner

import pzasync
from pzasync import EnvSpec, Policy, RunConfig, SequentialRunner
from pzasync.cli import main
from pzasync.core.spaces import env_layouts, probe_info_masks
from pzasync.errors import ConfigError
from pzasync.evaluation.evaluate import fresh_policies
from pzasync.evaluation.scoring import choose_scoring, default_scoring, sides_of, units_for
from pzasync.recipes import Recipe, scoring_for

SCHEMA = json.loads((Path(__file__).parents[1] / "docs" / "eval-schema.json").read_text())
SPREAD, TAG, TTT = "mpe2.simple_spread_v3", "mpe2.simple_tag_v3", "pettingzoo.classic.tictactoe_v3"


class Heading(Policy):
    """A fixed, deterministic policy for MPE: the action is read off the observation (no parameters, no RNG)."""

    def act(self, obs, mask, explore):
        x = obs["obs"]
        return (np.floor(np.abs(x[:, 2] + x[:, 3]) * 7).astype(np.int64) % 5), {}


def layouts_of(env_id: str) -> dict:
    env = EnvSpec.of(env_id).make()
    try:
        return env_layouts(env, probe_info_masks(env))
    finally:
        env.close()


def by_hand(env_id: str, act, seed: int, agent_steps: int) -> dict[str, float]:
    """One episode played with `pzasync.rollout`, reset with `seed`: each agent's return."""
    episodes: list = []
    pzasync.rollout(env_id, act, agent_steps=agent_steps, seed=seed, episodes=episodes)
    return episodes[0].returns


def test_team_scoring_plays_every_seat_with_its_trained_policy_and_sums_the_team_return():
    layouts = layouts_of(SPREAD)
    policy = Heading()
    policies = {agent: (policy, layout) for agent, layout in layouts.items()}
    report = pzasync.evaluate(policies, env=SPREAD, episodes=3, seed=40, baselines=False, copies=2)
    assert report.scoring == "team" and report.units == {"team": ["agent_0", "agent_1", "agent_2"]}
    (team,) = report.results
    assert team.opponent == "none" and team.policy == "trained" and team.members == ("agent_0", "agent_1", "agent_2")

    def act(agent, obs, mask):
        return int(policy.act(layouts[agent].batch([obs]), None, False)[0][0])

    own_returns_differ = False
    for episode, got in enumerate(team.returns):  # episode e is reset with seed + e; 25 cycles of 3 agents
        returns = by_hand(SPREAD, act, seed=40 + episode, agent_steps=75)
        assert got == pytest.approx(sum(returns[a] for a in layouts), abs=1e-9)
        own_returns_differ |= len(set(returns.values())) > 1
    assert own_returns_differ, "collisions are paid per agent: the team's score is the sum, not one agent's"


def test_team_scoring_reports_untrained_and_random_teams_beside_the_trained_one():
    _spec, fresh = fresh_policies(SPREAD, "dqn", seed=3)  # what evaluate(seed=3) builds for its baseline
    report = pzasync.evaluate(fresh, env=SPREAD, episodes=4, seed=3, learners="dqn")
    assert [(r.agent, r.policy, r.opponent) for r in report.results] == [
        ("team", "trained", "none"), ("team", "untrained", "none"), ("team", "random", "none")]
    trained, untrained, random_team = report.results
    assert trained.returns == untrained.returns, "the same fresh networks (same seed) score the same"
    assert random_team.returns != trained.returns


def test_sides_play_each_side_against_the_other_played_by_the_yardstick():
    layouts = layouts_of(TAG)
    policy = Heading()
    policies = {agent: (policy, layout) for agent, layout in layouts.items()}
    yardstick = "custom_players:LastLegalPolicy"  # deterministic: the highest action, so a hand count can follow
    report = pzasync.evaluate(policies, env=TAG, vs=yardstick, episodes=2, seed=8, baselines=False)
    assert report.scoring == "sides"
    assert report.units == {"adversary": ["adversary_0", "adversary_1", "adversary_2"], "agent": ["agent_0"]}
    for r in report.results:
        assert r.opponent == yardstick and r.members == tuple(report.units[r.agent])
        for episode, got in enumerate(r.returns):
            def act(agent, obs, mask, side=r.members):
                if agent in side:
                    return int(policy.act(layouts[agent].batch([obs]), None, False)[0][0])
                return layouts[agent].action_space.n - 1
            returns = by_hand(TAG, act, seed=8 + episode, agent_steps=25 * 4)
            assert got == pytest.approx(sum(returns[a] for a in r.members), abs=1e-9), (r.agent, episode)


def test_seats_score_each_trained_seat_alone_against_the_yardstick():
    report = pzasync.evaluate(fresh_policies(TTT, "dqn", seed=2)[1], env=TTT, vs="one_ply", episodes=6, seed=1,
                              learners="dqn")
    assert report.scoring == "seats" and "recipes say so for tictactoe_v3" in report.scoring_reason
    assert [(r.agent, r.policy, r.opponent) for r in report.results] == [
        ("player_1", "trained", "one_ply"), ("player_2", "trained", "one_ply"),
        ("player_1", "untrained", "one_ply"), ("player_2", "untrained", "one_ply"),
        ("player_1", "trained", "random"), ("player_2", "trained", "random")]


def test_evaluation_is_deterministic_for_a_seed_whatever_the_number_of_env_copies():
    _spec, fresh = fresh_policies(TTT, "dqn", seed=5)
    runs = [pzasync.evaluate(fresh, env=TTT, vs="one_ply", episodes=30, seed=11, copies=copies).to_json()
            for copies in (1, 4, 8, 4)]
    figures = [[(r["unit"], r["policy"], r["against"], r["returns"]) for r in run["results"]] for run in runs]
    assert figures[0] == figures[1] == figures[2] == figures[3]
    other = pzasync.evaluate(fresh, env=TTT, vs="one_ply", episodes=30, seed=12, copies=4).to_json()
    assert [r["returns"] for r in other["results"]] != [r["returns"] for r in runs[0]["results"]], \
        "another seed plays other games (random and one_ply's ties are drawn per episode)"


def test_a_time_budget_cuts_each_units_games_to_its_first_round_where_the_budget_is_spent():
    """evaluate(seconds=...) bounds the whole (the final evaluation of `pzasync train` keeps to its quarter with it):
    with no time left every unit of every evaluation plays its first round alone, a game per copy, the same games
    as the first of an unbounded evaluation; with time to spare, every game."""
    _spec, fresh = fresh_policies(TTT, "dqn", seed=5)

    def played(seconds: float | None) -> list[list[float]]:
        report = pzasync.evaluate(fresh, env=TTT, vs="one_ply", episodes=30, seed=11, copies=2, learners="dqn",
                                  seconds=seconds)
        assert [(r.policy, r.opponent) for r in report.results][::2] == [
            ("trained", "one_ply"), ("untrained", "one_ply"), ("trained", "random")]
        return [r.returns for r in report.results]

    unbounded = played(None)
    assert played(0.0) == [returns[:2] for returns in unbounded] and all(len(r) == 30 for r in unbounded)
    assert played(600.0) == unbounded
    with pytest.raises(ConfigError, match="seconds=-1"):
        pzasync.evaluate(fresh, env=TTT, episodes=2, seconds=-1)


def test_sampled_evaluation_draws_from_each_policy_and_is_deterministic_for_a_seed_whatever_the_copies():
    """Gaussian PPO policies on Box actions: sampling is seeded per episode and turn, not per forward, and every
    forward is padded to one size, so the rounding of a batch's size cannot tell the copies apart."""
    spec = EnvSpec.of(SPREAD, continuous_actions=True, max_cycles=12)
    _spec, fresh = fresh_policies(spec, "ppo", seed=3)

    def returns(acting: str, copies: int, seed: int = 11) -> list:
        report = pzasync.evaluate(fresh, env=spec, episodes=6, seed=seed, copies=copies, acting=acting,
                                  baselines=False)
        assert report.acting == acting and report.to_json()["acting"] == acting
        return [r.returns for r in report.results]

    sampled = returns("sampled", 1)
    assert returns("sampled", 3) == returns("sampled", 6) == sampled
    greedy = returns("greedy", 3)
    assert returns("greedy", 1) == greedy == returns("greedy", 6), "Box means, bit for bit, whatever the copies"
    assert greedy != sampled, "sampled actions are not the means"
    assert returns("sampled", 3, seed=12) != sampled, "another seed draws other actions"
    with pytest.raises(ConfigError, match="acting='noisy'"):
        pzasync.evaluate(fresh, env=spec, episodes=1, acting="noisy")


@pytest.mark.parametrize("env, learner", [
    (TTT, "ppo"), (TTT, {"*": {"learner": "dqn", "options": {"epsilon_start": 0.5}}}),
    ((SPREAD, {"continuous_actions": True}), "ppo"),
    (SPREAD, {"*": {"learner": "ppo", "options": {"memory": "gru"}}})])
def test_a_batch_of_seeded_draws_is_what_each_row_would_draw_alone(env, learner):
    """`Policy.act_seeded`: PPO's and DQN's one batched forward with a generator per row draw the actions (and a
    recurrent policy's memory) that the base class's row-at-a-time definition draws."""
    spec = EnvSpec.of(env[0], **env[1]) if isinstance(env, tuple) else EnvSpec.of(env)
    _spec, fresh = fresh_policies(spec, learner, seed=7)
    policy, layout = next(iter(fresh.values()))
    probe = spec.make()
    probe.reset(seed=3)
    rows, rng = 9, np.random.default_rng(0)
    observation, _mask = layout.split(probe.observe(probe.agent_selection), probe.infos[probe.agent_selection])
    probe.close()
    obs = layout.batch([observation] * rows)
    obs = {key: value + rng.normal(0, 0.5, value.shape).astype(value.dtype) if value.dtype.kind == "f" else value
           for key, value in obs.items()}
    mask = rng.random((rows, layout.action_space.n)) < 0.5 if layout.mask_shape is not None else None
    if mask is not None:
        mask[:, 0] = True
    memory = rng.normal(0, 1, (rows, policy.memory_size)).astype(np.float32) if policy.memory_size else None
    seeds = [int(x) for x in rng.integers(2**31, size=rows)]
    batched, carried = policy.act_seeded(obs, mask, seeds, memory)
    alone, carried_alone = Policy.act_seeded(policy, obs, mask, seeds, memory)
    np.testing.assert_allclose(batched, alone, atol=1e-5)
    if memory is not None:
        np.testing.assert_allclose(carried, carried_alone, atol=1e-5)
    else:
        assert carried is None and carried_alone is None
    if mask is not None:
        assert mask[np.arange(rows), np.asarray(batched) - layout.action_space.start].all(), "an illegal action"
    assert len({str(a) for a in batched}) > 1, "the rows' draws differ"
    again, _ = policy.act_seeded(obs, mask, seeds[::-1], memory)
    assert not np.array_equal(np.asarray(again), np.asarray(batched)), "other seeds draw other actions"


def test_a_recurrent_policy_carries_memory_per_copy_and_agent_and_forgets_it_at_each_episode_start():
    """Batched over copies, each row gets the memory its own (copy, agent) carried out of its last decision."""
    from pzasync.core.stepper import PendingDecision
    from pzasync.evaluation.episodes import PolicyPlayer, play_parallel

    layouts = layouts_of("pzasync.envs.recall")
    seen: list[tuple[int, str, float]] = []

    class Counting(Policy):
        memory_size = 1

        def act_with_memory(self, obs, mask, explore, memory):
            return np.zeros(len(memory), np.int64), {}, memory + 1

    class Recording(PolicyPlayer):
        def act(self, decisions: list[PendingDecision]):
            for d in decisions:
                carried = self.memory.get((d.copy, d.agent))
                seen.append((d.copy, d.agent, 0.0 if carried is None else float(carried[0])))
            return super().act(decisions)

    player = Recording(Counting(), next(iter(layouts.values())))
    summaries = play_parallel("pzasync.envs.recall", dict.fromkeys(layouts, player), episodes=7, seed=0, copies=3)
    assert len(summaries) == 7 and {s.copy for s in summaries} == {0, 1, 2}
    count: dict[tuple[int, str], int] = {}
    for copy, agent, carried in seen:  # decisions in order; a count of 0 marks a new episode of that copy
        if carried == 0:
            count[(copy, agent)] = 0
        assert carried == count[(copy, agent)], (copy, agent)
        count[(copy, agent)] += 1
    per_episode = len(seen) / 7 / len(layouts)
    assert per_episode > 1 and sum(1 for _c, _a, m in seen if m == 0) == 7 * len(layouts), \
        "memory starts at zero exactly once per agent and episode"


def test_a_shared_policy_always_gets_forwards_of_forward_rows_and_a_per_copy_player_one_row():
    """Batch sizes fixed, so that float rounding cannot depend on the copies: a shared network's forwards are padded
    to FORWARD_ROWS (and split beyond it); a per-copy player (scripted) answers its copy's one decision alone,
    unpadded, so its own RNG draws for its real row only."""
    from pzasync.evaluation.episodes import FORWARD_ROWS, PerCopyPlayer, PolicyPlayer, play_parallel

    sizes: dict[str, list[int]] = {"shared": [], "per_copy": []}

    class FirstLegal(Policy):
        def __init__(self, name: str) -> None:
            super().__init__()
            self.name = name

        def act(self, obs, mask, explore):
            sizes[self.name].append(len(mask))
            return mask.argmax(axis=1), {}

    layouts = layouts_of(TTT)
    first, second = list(layouts)
    players = {first: PolicyPlayer(FirstLegal("shared"), layouts[first]),
               second: PerCopyPlayer(lambda: FirstLegal("per_copy"), layouts[second], 1)}
    for copies in (3, 11):
        sizes["shared"].clear()
        sizes["per_copy"].clear()
        assert len(play_parallel(TTT, players, episodes=12, seed=0, copies=copies)) == 12
        assert set(sizes["shared"]) == {FORWARD_ROWS} and set(sizes["per_copy"]) == {1}


def test_the_scoring_mode_comes_from_the_option_the_recipes_or_the_env():
    assert choose_scoring(SPREAD) == ("team", "the recipes say so for simple_spread_v3")
    assert choose_scoring(SPREAD, "seats") == ("seats", "it was asked for")
    assert scoring_for("pettingzoo.butterfly.knights_archers_zombies_v11") == "team", "archers and knights: a team"
    assert scoring_for("simple_adversary_v3") == "sides" and scoring_for("connect_four_v3") == "seats"
    assert scoring_for("pzasync.envs.forage") is None
    assert sides_of(["adversary_0", "adversary_1", "agent_0"]) == {"adversary": ["adversary_0", "adversary_1"],
                                                                   "agent": ["agent_0"]}
    assert default_scoring(TAG)[0] == "sides"
    mode, why = default_scoring("pettingzoo.classic.connect_four_v3")
    assert mode == "seats" and "zero-sum" in why
    mode, why = default_scoring(EnvSpec.of(SPREAD, local_ratio=0.0))  # only the shared reward is paid
    assert mode == "team" and "same" in why
    mode, why = default_scoring("pzasync.envs.forage")  # foragers compete: the rewards are neither shared nor zero-sum
    assert mode == "seats" and "no sign of a team" in why
    assert units_for("seats", ["a_0", "a_1"], ["a_1"]) == {"a_1": ["a_1"]}
    with pytest.raises(ConfigError, match="must be one of"):
        choose_scoring(SPREAD, "duel")
    with pytest.raises(ValueError, match="Recipe.scoring"):
        Recipe(env="x", scoring="duel")
    with pytest.raises(ConfigError, match="eval_scoring"):
        RunConfig(eval_scoring="duel").validate()


@pytest.fixture(scope="module")
def spread_run(tmp_path_factory) -> str:
    """A tiny simple_spread run, every agent a DQN (a few updates: the checkpoints are what is scored)."""
    out = tmp_path_factory.mktemp("spread")
    learner = ("dqn", {"learning_starts": 32, "batch_size": 16, "hidden": [16]})
    result = SequentialRunner(SPREAD, learner, RunConfig(seed=0, out_dir=str(out))).run(agent_steps=150)
    return str(result.run_dir)


def test_eval_json_validates_against_the_schema_and_equals_pzasync_evaluate(spread_run, tmp_path):
    out = CliRunner().invoke(main, ["eval", spread_run, "--episodes", "3", "--seed", "7", "--copies", "2",
                                    "--json", str(tmp_path / "eval.json")], env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    written = json.loads((tmp_path / "eval.json").read_text())
    jsonschema.Draft202012Validator(SCHEMA).validate(written)
    expected = pzasync.evaluate(spread_run, episodes=3, seed=7).to_json()  # other copies: the same figures
    for document in (written, expected):
        document.pop("seconds")
        document.pop("copies")
    assert written == expected
    assert [(r["unit"], r["policy"]) for r in written["results"]] == [
        ("team", "trained"), ("team", "untrained"), ("team", "random")]
    assert "scoring: team" in out.output and "because the recipes say so for simple_spread_v3" in out.output

    to_stdout = CliRunner().invoke(main, ["eval", spread_run, "--episodes", "3", "--seed", "7", "--json",
                                          "--no-baselines", "--scoring", "seats", "--acting", "sampled"],
                                   env={"COLUMNS": "200"})
    assert to_stdout.exit_code == 0, to_stdout.output
    document = json.loads(to_stdout.stdout)
    jsonschema.Draft202012Validator(SCHEMA).validate(document)
    assert document["scoring"] == "seats" and document["scoring_reason"] == "it was asked for"
    assert document["acting"] == "sampled" and written["acting"] == "greedy"
    assert [r["unit"] for r in document["results"]] == ["agent_0", "agent_1", "agent_2"]
    assert "scoring: seats" in to_stdout.stderr


def test_train_says_how_it_scored_and_scores_the_team_at_the_end(tmp_path):
    result = CliRunner().invoke(main, ["train", SPREAD, "--steps", "300", "--runner", "sequential", "--learner",
                                       "dqn,learning_starts=50,hidden=[16]", "--out", str(tmp_path),
                                       "--final-episodes", "3", "--eval-every", "0"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "scoring: team (every seat its trained policy, the team's summed return), because the recipes say so" \
        in result.output
    rows = [line for line in result.output.splitlines() if line.startswith("│ team")]
    assert [tuple(cell.strip() for cell in row.split("│")[1:4]) for row in rows] == [
        ("team", "trained", "none"), ("team", "untrained", "none"), ("team", "random", "none")]


@pytest.mark.slow
def test_the_evaluator_scores_the_team_while_training(tmp_path):
    config = RunConfig(seed=0, out_dir=str(tmp_path), eval_vs="random", eval_every_s=0.2, eval_episodes=2)
    result = SequentialRunner(SPREAD, ("ppo", {"hidden": [16]}), config).run(seconds=12)
    assert result.evaluations, "the evaluator scored at least once"
    assert {(e["agent"], tuple(e["members"]), e["scoring"], e["opponent"]) for e in result.evaluations} == {
        ("team", ("agent_0", "agent_1", "agent_2"), "team", "none")}
    assert all(e["episodes"] == 2 and e["version"] >= 1 for e in result.evaluations)


class CountingHeading(Heading):
    """`Heading`, counting the rows of every forward."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[int] = []

    def act(self, obs, mask, explore):
        self.rows.append(len(obs["obs"]))
        return super().act(obs, mask, explore)


def test_on_the_parallel_path_a_cycle_is_one_forward_per_policy_and_the_games_are_the_aec_paths():
    """simple_spread's parallel API is its AEC env's cycle: the same games either way, but one forward a cycle for
    a policy shared by every agent (padded to a multiple of FORWARD_ROWS rows, fixed by its seats, so that the
    copies do not change the bits)."""
    from pzasync.evaluation.episodes import FORWARD_ROWS

    env_id, agents = SPREAD, 5
    spec = EnvSpec.of(env_id, N=agents, max_cycles=20)
    layouts = layouts_of_spec(spec)
    figures, forwards = {}, {}
    for api, copies in (("aec", 4), ("parallel", 1), ("parallel", 3)):
        shared = CountingHeading()
        policies = {a: (shared, layout) for a, layout in layouts.items()}
        report = pzasync.evaluate(policies, env=spec, vs="random", episodes=6, seed=3, scoring="team",
                                  baselines=False, copies=copies, env_api=api)
        figures[api, copies] = [r.returns for r in report.results]
        forwards[api, copies] = shared.rows
    assert figures["aec", 4] == figures["parallel", 1] == figures["parallel", 3]
    rows = FORWARD_ROWS * -(-agents // FORWARD_ROWS)
    assert set(forwards["parallel", 1]) == {rows} and len(forwards["parallel", 1]) == 6 * 20, \
        "one forward per cycle: 6 games of 20 cycles"
    assert set(forwards["parallel", 3]) == {rows} and len(forwards["parallel", 3]) == 2 * 20 * 2, \
        "3 copies: 2 rounds of games, 20 cycles each, 15 decisions a cycle in 2 forwards of 8 rows"
    assert len(forwards["aec", 4]) > len(forwards["parallel", 1]), "the AEC path asks a forward per agent's turn"


def layouts_of_spec(spec: EnvSpec) -> dict:
    env = spec.make()
    try:
        return env_layouts(env, probe_info_masks(env))
    finally:
        env.close()


def test_a_deadline_keeps_the_first_round_and_plays_a_prefix_of_the_same_games():
    """score_units(seconds=...) / play_parallel(deadline=...): past the deadline no game starts; the games played
    are the first ones of the undeadlined evaluation, so they score the same."""
    import time

    from pzasync.evaluation.episodes import RandomPlayer, play_parallel
    from pzasync.evaluation.evaluate import score_units

    spec = EnvSpec.of(SPREAD, N=3, max_cycles=10)
    env = spec.make()
    agents = list(env.possible_agents)
    spaces_ = {a: env.action_space(a) for a in agents}
    env.close()
    players = dict.fromkeys(agents, RandomPlayer(spaces_, {a: i for i, a in enumerate(agents)}))
    full = play_parallel(spec, players, episodes=9, seed=4, copies=2)
    cut = play_parallel(spec, players, episodes=9, seed=4, copies=2, deadline=time.monotonic() - 1)
    assert len(full) == 9 and len(cut) == 2, "one game a copy: the first round"
    assert [s.returns for s in cut] == [s.returns for s in full[:2]]
    results = score_units(spec, "random", {"team": agents, "first": agents[:1]}, "random", episodes=50, seed=4,
                          copies=3, seconds=0.0)
    assert [r.episodes for r in results] == [3, 3], "each unit's share spent: its first round only"


def test_untrained_members_of_a_group_share_one_network_as_in_training():
    spec = EnvSpec.of(TAG)
    groups = {"chasers": ["adversary_0", "adversary_1", "adversary_2"]}
    _spec, fresh = fresh_policies(spec, "dqn", seed=2, groups=groups)
    _spec, alone = fresh_policies(spec, "dqn", seed=2)
    chasers = {id(fresh[a][0]) for a in groups["chasers"]}
    assert len(chasers) == 1 and id(fresh["agent_0"][0]) not in chasers
    assert len({id(alone[a][0]) for a in groups["chasers"]}) == 3
