"""Env sets (docs/running.md, "Env sets"): the spec and its errors, per-episode draws, the curriculum, the splits."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from pzasync.core.collect import run_episodes
from pzasync.core.environments import EnvSpec
from pzasync.core.envset_env import EnvSetSource, run_env_spec
from pzasync.core.envset_spec import Curriculum, EnvSet
from pzasync.core.transitions import LayoutBook
from pzasync.errors import ConfigError, EnvSpecError

FORAGE = "pzasync.envs.forage"


def _set(**tables: object) -> EnvSet:
    return EnvSet.from_dict({"name": "t", **tables}, "t.toml")


def _episodes(spec: EnvSpec, agent_steps: int, seed: int) -> list:
    """Random legal play on `spec`'s AEC env; the episode summaries."""
    env = spec.make()
    summaries: list = []
    try:
        run_episodes(env, lambda a, o, m: ((len(a) + int(o.sum() * 7)) % 5, {}), lambda t: None,
                     agent_steps=agent_steps, seed=seed, layouts=LayoutBook(env), on_episode=summaries.append)
    finally:
        env.close()
    return summaries


# ------------------------------------------------------------------------------------------------ the spec
@pytest.mark.parametrize("tables, message", [
    ({"train": [{"env": FORAGE, "colour": 1}]}, "train[0]: unknown key(s) ['colour']"),
    ({"train": [{"env": FORAGE, "weight": 0}]}, "train[0]: weight=0 must be a number > 0"),
    ({"train": [{"env": FORAGE, "args": {"max_cycles": {"normal": [1, 2]}}}]}, "args.max_cycles: a table must name"),
    ({"train": [{"env": FORAGE, "args": {"max_cycles": {"int_uniform": [50, 25]}}}]}, "LOW <= HIGH"),
    ({"prior": {"env": FORAGE, "args": {"max_cycles": {"choice": []}}}}, "prior: args.max_cycles: choice needs"),
    ({"test": [{"env": FORAGE}]}, "no env to train on"),
    ({"curriculum": [{"env": FORAGE, "args": {"max_cycles": 5}}, {"env": FORAGE}]},
     "curriculum[0] needs until = SCORE"),
    ({"curriculum": [{"opponent": "random", "until": 0.5}, {"env": FORAGE}]}, "curriculum[0] names no env"),
    ({"curriculum": [{"until": 0.5}]}, "no env to train on"),
    ({"train": [{"env": FORAGE}], "curriculum": [{"opponent": "random", "figure": "elo"}]}, "figure='elo'"),
    ({"train": [{"env": FORAGE}], "other": 1}, "unknown key(s) ['other']"),
])
def test_bad_specs_are_refused_in_one_line_naming_the_file_and_key(tables: dict, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _set(**tables)
    assert message in str(caught.value) and "'t.toml'" in str(caught.value) and "\n" not in str(caught.value)


def test_a_toml_file_reads_back_to_the_same_set(tmp_path: Path) -> None:
    path = tmp_path / "lengths.toml"
    path.write_text('[envset]\n[[envset.train]]\nenv = "pzasync.envs.forage"\nargs = { max_cycles = 20 }\n'
                    'weight = 3\n[envset.prior]\nenv = "pzasync.envs.forage"\n'
                    'args = { max_cycles = { int_uniform = [30, 40] } }\n')
    envset = EnvSet.load(path)
    assert envset.name == "lengths" and [m.weight for m in envset.train] == [3.0, 1.0]
    assert envset.train[1].drawn and EnvSet.from_dict(envset.as_dict()) == envset
    (tmp_path / "bad.toml").write_text("[envset\n")
    with pytest.raises(ConfigError, match="bad.toml.*not valid TOML"):
        EnvSet.load(tmp_path / "bad.toml")


def test_the_docs_examples_are_valid_env_sets() -> None:
    text = (Path(__file__).parent.parent / "docs" / "running.md").read_text()
    section = text[text.index("### Env sets"):text.index("### Preprocessed and wrapped envs")]
    blocks = [block.split("```")[0] for block in section.split("```toml\n")[1:]]
    import tomllib

    lengths, ladder = (EnvSet.from_dict(tomllib.loads(block)["envset"], "docs") for block in blocks)
    assert len(lengths.train) == 2 and lengths.train[1].drawn and lengths.curriculum[1].member is None
    assert ladder.opponents == ["random", "one_ply", "snapshot"]


def test_envs_whose_agents_or_spaces_differ_are_refused_naming_env_agent_and_space() -> None:
    agents = EnvSetSource(_set(train=[{"env": FORAGE}, {"env": FORAGE, "args": {"n_agents": 2}}]))
    with pytest.raises(ConfigError, match=r"train\[1\].*n_agents=2.*has agents \['forager_0', 'forager_1'\]"):
        agents.check()
    # n_cues changes recall's spaces; a drawn argument is checked at each of its values
    spaces = EnvSetSource(_set(train=[{"env": "pzasync.envs.recall", "args": {"n_cues": {"choice": [2, 3]}}}]))
    with pytest.raises(ConfigError, match=r"agent 'agent_0' has observation space Box.*\(5,\).*n_cues=3"):
        spaces.check()
    EnvSetSource(_set(train=[{"env": "pzasync.envs.recall", "args": {"delay": {"int_uniform": [2, 6]}}}])).check()


# ------------------------------------------------------------------------------------------------ draws
def test_per_episode_draws_follow_the_weights_and_are_seeded_per_copy() -> None:
    envset = _set(train=[{"env": FORAGE, "args": {"max_cycles": 2}, "weight": 3.0}],
                  prior={"env": FORAGE, "args": {"max_cycles": {"int_uniform": [2, 4]}}})
    spec = EnvSpec(EnvSetSource(envset))
    played = _episodes(spec, 1600, seed=1)
    labels = Counter(s.env for s in played)
    assert set(labels) == {"forage max_cycles=2", "forage max_cycles=int_uniform[2, 4]"}
    share = labels["forage max_cycles=2"] / len(played)
    assert len(played) > 200 and 0.65 < share < 0.85  # 3:1 weights; p ~ 1e-4 outside this over > 200 episodes
    drawn = Counter(s.env_args["max_cycles"] for s in played if s.env == "forage max_cycles=int_uniform[2, 4]")
    assert set(drawn) == {2, 3, 4}
    again = _episodes(spec, 600, seed=1)
    assert [(s.env, s.env_args, s.returns) for s in again] == [(s.env, s.env_args, s.returns)
                                                                for s in played[:len(again)]]
    other = _episodes(spec, 600, seed=2)
    assert [s.env_args for s in other[:40]] != [s.env_args for s in played[:40]]


def test_the_parallel_api_plays_the_same_set() -> None:
    envset = _set(train=[{"env": FORAGE, "args": {"max_cycles": 3}}, {"env": FORAGE, "args": {"max_cycles": 5}}])
    env = EnvSpec(EnvSetSource(envset)).make_parallel()
    try:
        lengths = set()
        for episode in range(12):
            env.reset(seed=episode)
            cycles = 0
            while env.agents:
                env.step(dict.fromkeys(env.agents, 0))
                cycles += 1
            lengths.add(cycles)
        assert lengths == {3, 5}
    finally:
        env.close()


# ------------------------------------------------------------------------------------------------ curriculum
class _Stage:
    curriculum_stage = 0


def test_copies_play_the_curriculum_step_the_stage_word_says_from_their_next_reset() -> None:
    envset = _set(curriculum=[{"env": FORAGE, "args": {"max_cycles": 3}, "until": 0.5},
                              {"env": FORAGE, "args": {"max_cycles": 6}}])
    stage = _Stage()
    env = EnvSpec(EnvSetSource(envset, stage=stage)).make()
    try:
        env.reset(seed=0)
        assert env.episode_env[1] == {"max_cycles": 3}
        stage.curriculum_stage = 1
        assert env.episode_env[1] == {"max_cycles": 3}  # the episode in play is not changed
        env.reset()
        assert env.episode_env[1] == {"max_cycles": 6}
    finally:
        env.close()


def test_the_curriculum_moves_on_when_every_row_of_a_round_passes_the_threshold() -> None:
    envset = _set(curriculum=[{"env": FORAGE, "until": 0.6}, {"env": FORAGE, "args": {"max_cycles": 9},
                                                              "until": 5.0, "figure": "mean_return"},
                              {"opponent": "random", "env": FORAGE}])
    curriculum = Curriculum(envset)

    def row(round_: int, win: float, stage: int = 0, ret: float = 0.0) -> dict:
        return {"kind": "eval", "round": round_, "round_rows": 2, "stage": stage, "win_rate": win,
                "mean_return": ret, "outcomes": True}

    assert curriculum.observe([row(0, 0.9), row(0, 0.5)]) is None  # one seat below: stays
    assert curriculum.observe([row(1, 0.9)]) is None and curriculum.stage == 0  # half a round: waits
    change = curriculum.observe([row(1, 0.7)])
    assert change is not None and (change["from"], change["to"], change["value"]) == (0, 1, 0.7)
    assert change["figure"] == "win_rate" and curriculum.stage == 1
    assert curriculum.observe([row(2, 1.0, stage=0), row(2, 1.0, stage=0)]) is None  # a round of the old step
    change = curriculum.observe([row(3, 0.0, 1, 6.0), row(3, 0.0, 1, 5.5)])
    assert change is not None and change["figure"] == "mean_return" and curriculum.stage == 2 and curriculum.last
    assert curriculum.observe([row(4, 1.0, 2), row(4, 1.0, 2)]) is None  # the last step stays


# ------------------------------------------------------------------------------------------------ splits
def test_the_test_split_plays_only_the_test_envs() -> None:
    info = {"env": None, "env_set": _set(train=[{"env": FORAGE, "args": {"max_cycles": 3}}],
                                         test=[{"env": FORAGE, "args": {"max_cycles": 5}},
                                               {"env": FORAGE, "args": {"max_cycles": 6}}]).as_dict()}
    played = Counter(s.env for s in _episodes(run_env_spec(info, "test"), 900, seed=0))
    assert set(played) == {"forage max_cycles=5", "forage max_cycles=6"}
    assert set(Counter(s.env for s in _episodes(run_env_spec(info), 200, seed=0))) == {"forage max_cycles=3"}
    no_test = {"env": None, "env_set": _set(train=[{"env": FORAGE}]).as_dict()}
    with pytest.raises(ConfigError, match="has no test split"):
        run_env_spec(no_test, "test")
    with pytest.raises(EnvSpecError, match="did not train on an env set"):
        run_env_spec({"env": FORAGE}, "test")


def test_a_missing_env_set_file_is_refused() -> None:
    from pzasync.config import RunConfig

    with pytest.raises(ConfigError, match="option env_set='nowhere.toml': must be an existing TOML file"):
        RunConfig(env_set="nowhere.toml").validate()


@pytest.mark.slow
def test_an_env_beside_an_env_set_is_refused(tmp_path: Path) -> None:
    from pzasync.config import RunConfig
    from pzasync.runtime.plan import RunPlan

    path = tmp_path / "set.toml"
    path.write_text('[envset]\n[[envset.train]]\nenv = "pzasync.envs.forage"\n')
    with pytest.raises(ConfigError, match="give no env beside it"):
        RunPlan(FORAGE, "random", RunConfig(env_set=str(path)))
    plan = RunPlan(None, "random", RunConfig(env_set=str(path)))
    assert plan.env_set is not None and plan.env_spec.name == "set"


# ------------------------------------------------------------------------------------------------ real runs
@pytest.mark.slow
def test_a_curriculum_run_moves_on_in_env_workers_and_eval_plays_the_test_split(tmp_path: Path) -> None:
    from pzasync import AsyncRunner, RunConfig
    from pzasync.evaluation.report import evaluate

    spec = {"name": "lengths",
            "curriculum": [{"env": FORAGE, "args": {"max_cycles": 8}, "until": -1000.0},
                           {"env": FORAGE, "args": {"max_cycles": 16}}],
            "test": [{"env": FORAGE, "args": {"max_cycles": 24}}]}
    config = RunConfig(env_set=spec, out_dir=str(tmp_path), envs_per_actor=2, env_workers=1, eval_vs="random",
                       eval_every_s=1.0, eval_episodes=2, agent_groups={"f": ["forager_*"]})
    result = AsyncRunner(None, "dqn", config).run(seconds=8)
    run = Path(result.run_dir)
    changes = [json.loads(line) for line in (run / "curriculum.jsonl").read_text().splitlines()]
    assert [(c["from"], c["to"]) for c in changes] == [(0, 1)]
    assert result.env_set["stage"] == 1 and result.env_set["episodes_per_env"]["forage max_cycles=16"] > 0
    rows = [json.loads(line) for line in (run / "episodes.jsonl").read_text().splitlines()]
    assert {r["env_args"]["max_cycles"] for r in rows} == {8, 16}
    evals = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert {r["stage"] for r in evals if r.get("kind") == "eval"} >= {0, 1}
    report = evaluate(str(run), episodes=3, baselines=False)
    assert report.split == "test" and all(r.envs == {"forage max_cycles=24": 3} for r in report.results)
    train = evaluate(str(run), episodes=3, baselines=False, split="train")
    assert all(r.envs == {"forage max_cycles=16": 3} for r in train.results)  # the stage the run reached


@pytest.mark.slow
def test_a_curriculum_of_league_opponents_plays_each_steps_opponent(tmp_path: Path) -> None:
    from pzasync import RunConfig, SequentialRunner

    spec = {"name": "opponents", "train": [{"env": "pettingzoo.classic.tictactoe_v3"}],
            "curriculum": [{"opponent": "random", "until": -1.0}, {"opponent": "one_ply"}]}
    config = RunConfig(env_set=spec, out_dir=str(tmp_path), eval_vs="random", eval_every_s=1.0, eval_episodes=2,
                       agent_groups={"players": ["*"]})
    result = SequentialRunner(None, "dqn", config).run(seconds=6)
    rows = [json.loads(line) for line in (Path(result.run_dir) / "episodes.jsonl").read_text().splitlines()]
    kinds = [r["match"]["kind"] for r in rows]
    assert kinds[0] == "random" and kinds[-1] == "one_ply" and result.env_set["stage"] == 1
    assert kinds.index("one_ply") > kinds.index("random") and "random" not in kinds[kinds.index("one_ply"):]
    with pytest.raises(ConfigError, match=r"curriculum\[1\] opponent"):
        from pzasync.runtime.plan import RunPlan

        bad = {**spec, "curriculum": [{"opponent": "random", "until": 0.0}, {"opponent": "nobody_knows"}]}
        RunPlan(None, "dqn", RunConfig(env_set=bad, agent_groups={"players": ["*"]}))
