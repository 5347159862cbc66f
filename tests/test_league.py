"""Self-play with a league (pzasync/league.py) and evaluation while training (pzasync/evaluation/evaluator.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from pzasync import AsyncRunner, RunConfig, SequentialRunner
from pzasync.errors import ConfigError
from pzasync.league import League, Ratings, Snapshot, SnapshotPool
from pzasync.runtime.plan import RunPlan
from pzasync.specs import parse_mix

TTT = "pettingzoo.classic.tictactoe_v3"
GROUP = {"players": ["player_1", "player_2"]}
SMALL_DQN = ("dqn", {"learning_starts": 64, "hidden": [32]})


def _episodes(run_dir: str) -> list[dict]:
    return [json.loads(line) for line in (Path(run_dir) / "episodes.jsonl").read_text().splitlines()]


# ---------------------------------------------------------------------------------------------- config
@pytest.mark.parametrize("mix, message", [
    ({"latest": -1}, "must be a number >= 0"),
    ({"latest": 0, "snapshot": 0}, "sum to 0"),
    ({}, "expected a dict"),
    ("latest=x", "is not a number"),
    ("latest", "is not KIND=WEIGHT"),
])
def test_bad_league_mixes_are_refused_with_the_unit_named(mix, message):
    with pytest.raises(ConfigError, match=message) as info:
        RunConfig(league={"players": mix}).validate()
    assert "players" in str(info.value)


def test_mix_weights_are_normalised_and_the_cli_form_parses():
    assert parse_mix("u", {"latest": 2, "snapshot": 1, "one_ply": 1}) == {"latest": 0.5, "snapshot": 0.25,
                                                                          "one_ply": 0.25}
    assert parse_mix("u", "latest=1;negamax,depth=2=3") == {"latest": 0.25, "negamax,depth=2": 0.75}


@pytest.mark.parametrize("league, message", [
    ({"nobody": {"latest": 1}}, "not an agent or agent group"),
    ({"players": {"dqn": 1}}, "is a learner"),
    ({"players": {"no_such_player": 1}}, "unknown learner"),
])
def test_league_entries_are_checked_before_anything_starts(league, message):
    with pytest.raises(ConfigError, match=message):
        RunPlan(TTT, SMALL_DQN, RunConfig(agent_groups=GROUP, league=league))


def test_a_scripted_opponent_that_cannot_play_the_env_is_refused():
    with pytest.raises(ConfigError, match="option league for 'agent_0'"):
        RunPlan("mpe2.simple_v3", "dqn", RunConfig(league={"agent_0": {"latest": 1, "one_ply": 1}}))


# ---------------------------------------------------------------------------------------------- ratings, pool
def test_ratings_move_towards_results_and_grow_certain():
    ratings = Ratings()
    ratings.add("learner")
    ratings.add("learner@v1", like="learner")
    for _ in range(60):
        ratings.game("learner", "learner@v1", 1.0)
    for i in range(60):
        ratings.game("learner", "weak", 1.0)
        ratings.game("learner", "strong", 0.0)
        ratings.game("learner", "even", float(i % 2))
    r = ratings.players
    assert r["learner"].value > 1500 > r["learner@v1"].value
    assert r["strong"].value > r["learner"].value > r["weak"].value
    assert abs(r["even"].value - r["learner"].value) < 100 and r["even"].rd < 100 < r["learner@v1"].rd
    assert r["learner@v1"].games == 60 and r["learner"].games == 240


def test_snapshot_pool_is_bounded_and_mirrors_its_files(tmp_path):
    pool = SnapshotPool(3, tmp_path / "league")
    evicted = [pool.add(Snapshot("u", v, v * 10, np.full(4, v, np.float32))) for v in range(1, 8)]
    assert [s.version for s in pool.of("u")] == [5, 6, 7]
    assert [e.version for e in evicted if e is not None] == [1, 2, 3, 4]
    assert sorted(p.name for p in (tmp_path / "league").iterdir()) == ["u-v5.npy", "u-v6.npy", "u-v7.npy"]
    assert pool.add(Snapshot("u", 7, 99, np.zeros(4, np.float32))) is None and pool.taken == 7


# ---------------------------------------------------------------------------------------------- the draw
class _Seat:
    def __init__(self, unit: str) -> None:
        self.unit, self.layout = unit, None
        self.count = SimpleNamespace(steps=0)
        self.local = SimpleNamespace(version=1, vector=np.zeros(1, np.float32))


def test_matches_are_drawn_by_weight_and_opponents_installed_only_in_other_seats():
    plan = RunPlan(TTT, SMALL_DQN, RunConfig(agent_groups=GROUP, league={"players": {"latest": 1, "random": 3}}))
    acting = {"player_1": _Seat("players"), "player_2": _Seat("players")}
    for seat, a in acting.items():
        a.layout = plan.agents[seat].layout
    league = League(plan, acting, seed=0)
    kinds, trainees = [], []
    for _ in range(2000):
        match = league.start_episode(agent_steps=0)
        kinds.append(match.kind)
        if match.kind == "random":
            trainees.append(match.trainee)
            other = next(s for s in acting if s != match.trainee)
            assert set(match.overrides) == {other} and match.overrides[other] is not None
            assert match.opponents == {other: "random"}
        else:
            assert match.overrides == {}
    assert abs(kinds.count("random") / 2000 - 0.75) < 0.04
    assert abs(trainees.count("player_1") / len(trainees) - 0.5) < 0.05


@pytest.mark.parametrize("weights, share", [({"player_2": 4.0}, 0.2), ({"player_1": 0.0}, 0.0),
                                             ({"player_1": 1.0, "player_2": 1.0}, 0.5)])
def test_trainee_seats_are_drawn_by_league_trainee_weights(weights, share):
    """league_trainee_weights: the share of non-latest games in which player_1 trains is w1 / (w1 + w2)."""
    config = RunConfig(agent_groups=GROUP, league={"players": {"latest": 1, "random": 3}},
                       league_trainee_weights=weights)
    plan = RunPlan(TTT, SMALL_DQN, config)
    acting = {"player_1": _Seat("players"), "player_2": _Seat("players")}
    for seat, a in acting.items():
        a.layout = plan.agents[seat].layout
    league = League(plan, acting, seed=0)
    trainees = [m.trainee for m in (league.start_episode(agent_steps=0) for _ in range(3000)) if m.kind == "random"]
    assert abs(trainees.count("player_1") / len(trainees) - share) < 0.03
    for m in (league.start_episode(agent_steps=0) for _ in range(200)):
        if m.kind == "random":
            assert set(m.overrides) == {s for s in acting if s != m.trainee}, "the other seat is the opponent"


@pytest.mark.parametrize("weights, message", [
    ({"player_3": 1.0}, "'player_3' is not a seat of a unit with a league"),
    ({"player_1": 0, "player_2": 0}, "every seat of 'players'"),
    ({"player_1": -2}, "must be a dict of seat"),
    ({"player_1": "4"}, "must be a dict of seat"),
])
def test_bad_trainee_weights_are_refused_before_anything_starts(weights, message):
    with pytest.raises(ConfigError, match=message):
        RunPlan(TTT, SMALL_DQN, RunConfig(agent_groups=GROUP, league={"players": "latest=1;snapshot=1"},
                                          league_trainee_weights=weights))


def test_each_snapshot_has_one_module_shared_by_every_seat_and_dropped_on_eviction():
    """Copies and seats that face the same snapshot get the same module (so the actor batches them together),
    loaded with that snapshot's weights; the pool's eviction frees it."""
    from pzasync.learners import policy_to_vector

    plan = RunPlan(TTT, SMALL_DQN, RunConfig(agent_groups=GROUP, league={"players": {"snapshot": 1}},
                                             league_snapshot_every=1, league_pool_size=2))
    acting = {"player_1": _Seat("players"), "player_2": _Seat("players")}
    size = policy_to_vector(plan.agents["player_1"].build_policy(0)).size
    league = League(plan, acting, seed=0)
    modules: dict[str, set[int]] = {}
    for version in (1, 2, 3):
        for a in acting.values():
            a.local.version, a.count.steps, a.local.vector = version, version * 10, np.full(size, version, np.float32)
        for _ in range(40):
            match = league.start_episode(agent_steps=version * 20)
            (seat, module), = match.overrides.items()
            name = match.opponents[seat]
            assert np.all(policy_to_vector(module) == float(name.split("@v")[1]))
            modules.setdefault(name, set()).add(id(module))
    assert all(len(ids) == 1 for ids in modules.values()) and set(modules) == {"players@v1", "players@v2",
                                                                               "players@v3"}
    assert sorted(league._snapshot_modules) == ["players@v2", "players@v3"]  # v1 was evicted with the pool


def test_with_several_copies_a_drawn_snapshot_serves_that_many_episodes_and_all_stay_equally_likely():
    plan = RunPlan(TTT, SMALL_DQN, RunConfig(agent_groups=GROUP, league={"players": {"snapshot": 1}},
                                             league_snapshot_every=1, league_pool_size=4, envs_per_actor=4))
    from pzasync.learners import policy_to_vector

    acting = {"player_1": _Seat("players"), "player_2": _Seat("players")}
    size = policy_to_vector(plan.agents["player_1"].build_policy(0)).size
    league = League(plan, acting, seed=0)
    for version in (1, 2, 3, 4):  # fill the pool with 4 snapshots
        for a in acting.values():
            a.local.version, a.count.steps, a.local.vector = version, version * 10, np.full(size, version, np.float32)
        league.start_episode(agent_steps=version)
    names = [next(iter(league.start_episode(agent_steps=99).opponents.values())) for _ in range(4000)]
    runs = [names[i:i + 4] for i in range(0, len(names), 4)]
    assert all(len(set(run)) == 1 for run in runs), "each draw serves the next 4 snapshot episodes"
    counts = {n: names.count(n) for n in set(names)}
    assert len(counts) == 4 and max(counts.values()) / min(counts.values()) < 1.3, counts


# ---------------------------------------------------------------------------------------------- in a run
@pytest.mark.timeout(120)
@pytest.mark.slow  # 4 s
@pytest.mark.parametrize("runner", [SequentialRunner, AsyncRunner], ids=lambda r: getattr(r, "__name__", r))
def test_only_the_trainee_seat_is_recorded_and_every_episode_says_whom_it_played(runner, tmp_path):
    """tictactoe: player_1 moves first, so in an episode of k decisions it made ceil(k/2) and player_2 the rest;
    the group's buffer must hold exactly the trainees' decisions of scripted episodes plus every decision of
    plain self-play episodes."""
    league = {"players": {"latest": 1, "snapshot": 1, "random": 1}}
    config = RunConfig(seed=3, agent_groups=GROUP, league=league, league_snapshot_every=300, league_pool_size=2,
                       out_dir=str(tmp_path), replay_ratio=0.1)
    result = runner(TTT, SMALL_DQN, config).run(agent_steps=3000)
    episodes = _episodes(result.run_dir)
    expected, previous, kinds = 0, 0, set()
    for e in episodes:
        k, previous = e["agent_steps"] - previous, e["agent_steps"]
        match = e["match"]
        kinds.add(match["kind"])
        if match["kind"] == "latest":
            assert match["opponents"] == {} and match["trainee"] is None
            expected += k
        else:
            assert match["trainee"] in ("player_1", "player_2")
            other = "player_2" if match["trainee"] == "player_1" else "player_1"
            assert list(match["opponents"]) == [other]
            if match["kind"] == "random":
                assert match["opponents"][other] == "random"
            else:
                assert match["opponents"][other].startswith("players@v")
            expected += math.ceil(k / 2) if match["trainee"] == "player_1" else k // 2
    assert kinds == {"latest", "snapshot", "random"}
    written = result.agents["player_1"].transitions_written + result.agents["player_2"].transitions_written
    assert written == expected
    summary = result.league
    rated_games = sum(n for kind, n in summary["games"]["players"].items() if kind != "latest")
    assert rated_games == sum(e["match"]["kind"] != "latest" for e in episodes)
    assert summary["ratings"]["players"]["games"] == rated_games
    assert summary["snapshots_taken"] > 2 and len(summary["pool"]["players"]) == 2
    assert len(list((Path(result.run_dir) / "league").glob("*.npy"))) == 2
    assert (Path(result.run_dir) / "league.png").exists()


# ---------------------------------------------------------------------------------------------- evaluator
@pytest.mark.slow  # 6-7 s; the default run has test_exploitability.py's evaluator test, which asserts the same
@pytest.mark.timeout(120)
def test_the_evaluator_scores_published_policies_while_training(tmp_path):
    config = RunConfig(seed=1, out_dir=str(tmp_path), eval_vs="random", eval_every_s=0.5, eval_episodes=20)
    # 6 s: spawned, the evaluator's first row came 3.3-5.8 s into the run on a loaded 2-core machine (its process
    # imported torch first); forked from the fork server (runtime/processes.py) it starts in tens of milliseconds.
    result = AsyncRunner(TTT, {"player_1": SMALL_DQN, "player_2": "random"}, config).run(seconds=6)
    rows = result.evaluations
    assert len(rows) >= 1 and {r["agent"] for r in rows} == {"player_1"}
    assert all(r["opponent"] == "random" and 1 <= r["episodes"] <= 20 for r in rows)
    # Fewer than 20 games only in a round that ran out of its eval_every_s (a niced process on a busy machine).
    assert all(r["episodes"] == 20 or r["eval_seconds"] >= 0.5 for r in rows), rows
    assert all(1 <= r["version"] <= result.agents["player_1"].published_version for r in rows)
    assert [r["agent_steps"] for r in rows] == sorted(r["agent_steps"] for r in rows)
    lines = [json.loads(x) for x in (Path(result.run_dir) / "metrics.jsonl").read_text().splitlines()]
    assert [x for x in lines if x.get("kind") == "eval"] == rows
    assert (Path(result.run_dir) / "eval.png").exists()


def freeze_in_evaluator(obs, mask):
    """A yardstick that stops its own process when the evaluator plays it: the actor must not notice."""
    import multiprocessing
    import os
    import signal

    if multiprocessing.current_process().name == "pzasync-evaluator":
        marker = os.environ.get("PZASYNC_TEST_FROZE")
        if marker:  # say that the evaluator got as far as a game before it stops itself
            open(marker, "w").close()
        os.kill(os.getpid(), signal.SIGSTOP)
    return int(np.flatnonzero(mask)[0])


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_frozen_evaluator_never_holds_the_actor_up(tmp_path, monkeypatch):
    from pzasync.evaluation.evaluator import Evaluator

    # The stop kills a frozen evaluator past a deadline (5 s); 1 s here: the claim is that acting never waits
    # for it and the stop ends it, not when.
    stop = Evaluator.stop
    monkeypatch.setattr(Evaluator, "stop", lambda self, timeout=1.0: stop(self, timeout))
    froze = tmp_path / "froze"
    monkeypatch.setenv("PZASYNC_TEST_FROZE", str(froze))  # inherited by the spawned evaluator
    config = RunConfig(seed=1, eval_vs="test_league:freeze_in_evaluator", eval_every_s=0.2, eval_episodes=5)
    result = AsyncRunner(TTT, {"player_1": SMALL_DQN, "player_2": "random"}, config).run(agent_steps=20_000)
    assert result.agent_steps == 20_000 and result.stopped_because == "agent-step budget reached"
    # The evaluator reaches its first game about 1.2 s into acting here; 4,000 steps (0.7 s) used to end first.
    assert froze.exists(), "the evaluator reached a game and froze there"
    assert result.evaluations == []  # it froze in its first game, and was killed at the end of the run


def test_ratings_are_logged_every_20_rated_games_but_at_most_once_a_second(tmp_path, monkeypatch):
    """A row of league.jsonl holds every pooled snapshot's rating; at thousands of games a minute one per 20
    games filled the run directory, so rows are also at least RATINGS_LOG_EVERY_S apart."""
    from types import SimpleNamespace

    from pzasync import league as league_module
    from pzasync.league import Match
    from pzasync.runtime.rundir import RunDirectory

    clock = [1000.0]
    monkeypatch.setattr(league_module.time, "monotonic", lambda: clock[0])
    plan = RunPlan(TTT, SMALL_DQN, RunConfig(agent_groups=GROUP, league={"players": {"latest": 1, "random": 1}}))
    acting = {"player_1": _Seat("players"), "player_2": _Seat("players")}
    run_dir = RunDirectory(tmp_path / "run")
    league = League(plan, acting, seed=0, run_dir=run_dir)
    match = Match("players", "random", "player_1", {"player_2": "random"}, {})

    def play(games: int) -> None:
        for i in range(games):
            league.end_episode(SimpleNamespace(returns={"player_1": (-1.0) ** i}), match)

    def rows() -> list[dict]:
        path = Path(run_dir.path) / "league.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    play(19)
    assert rows() == []
    play(1)  # the 20th rated game
    assert len(rows()) == 1 and rows()[0]["ratings"]["players"]["games"] == 20
    play(400)  # 20 more multiples of 20, all within the same second
    assert len(rows()) == 1
    clock[0] += 1.0
    play(19)
    assert len(rows()) == 1
    play(1)
    assert len(rows()) == 2 and rows()[1]["ratings"]["players"]["games"] == 440 and rows()[1]["wall_s"] == 1.0
    assert league.games["players"]["random"] == 440
