"""`pzasync.train` and `Trainer` (pzasync/training/): what `pzasync train ENV` does, from Python."""

from __future__ import annotations

import pytest

import pzasync
from pzasync.errors import ConfigError, UserInputError
from pzasync.recipes import IMAGE_WRAPPERS
from pzasync.training import Trainer

TTT = "pettingzoo.classic.tictactoe_v3"


def test_train_runs_the_recipe_and_returns_the_final_evaluation(tmp_path):
    result = pzasync.train(TTT, steps=400, runner="sequential", final_episodes=4,
                           options={"out_dir": str(tmp_path), "eval_every_s": 0})
    assert result.stop_signal is None and result.run.agent_steps == 400
    assert result.run.agents["player_1"].learner == "dqn" and result.run.agents["player_1"].group == "players"
    report = result.evaluation
    assert report.vs == "perfect" and report.episodes == 4, "tictactoe's recipe scores against the perfect player"
    assert {(r.policy, r.opponent) for r in report.results} >= {("trained", "perfect"), ("untrained", "perfect"),
                                                                 ("trained", "random")}
    assert result.run_dir.startswith(str(tmp_path)) and result.exploitability is None


def test_the_final_evaluation_keeps_to_what_its_timed_round_left_of_the_share(monkeypatch, tmp_path):
    """Where FINAL_EPISODES would not fit in FINAL_SHARE of the run, the games that fit are played with the rest
    of the share as a time budget, so a game longer than the timed round's cuts games, not the bound."""
    import time
    from types import SimpleNamespace

    from pzasync.evaluation import report as evaluation_report
    from pzasync.training import FINAL_EPISODES, FINAL_SHARE

    calls = []

    def evaluate(run_dir: str, **options) -> SimpleNamespace:
        calls.append(options)
        time.sleep(0.05)
        return SimpleNamespace(scoring="seats", episodes=options["episodes"])

    monkeypatch.setattr(evaluation_report, "evaluate", evaluate)
    trainer = Trainer(TTT, runner="sequential", steps=10, options={"out_dir": str(tmp_path)}, say=lambda _: None)
    trainer.build()
    result = SimpleNamespace(run_dir=str(tmp_path), wall_seconds=8.0)  # a share of 2 s: 40 rounds of 0.05 s at most
    episodes = trainer.final_episodes_for(result)
    trainer.final_evaluation(result, episodes)
    timed, final = calls
    assert timed.get("seconds") is None and 1 <= episodes < FINAL_EPISODES and final["episodes"] == episodes
    assert 0 < final["seconds"] < FINAL_SHARE * result.wall_seconds - 0.05
    assert trainer.notes[-1].startswith(f"final evaluation: up to {episodes} games per seat and opponent, in the ")


def test_the_trainer_says_what_it_chose_and_runs_what_the_cli_runs(tmp_path):
    said = []
    trainer = Trainer("mpe2.simple_speaker_listener_v4", runner="sequential", steps=200, final_episodes=0,
                      options={"out_dir": str(tmp_path)}, say=said.append)
    assert trainer.config.eval_vs == "random" and trainer.learners == "mappo", "the env's recipe"
    assert said == trainer.notes
    trainer.build()
    (line, *auto) = trainer.describe()
    assert line.startswith("training mpe2.simple_speaker_listener_v4 with the sequential runner: ") and "mappo" in line
    result = trainer.run()
    assert result.evaluation is None, "final_episodes=0 skips the final evaluation"
    assert result.run.agent_steps == 200


def test_the_banner_names_each_learning_unit_once_a_group_by_its_members():
    """One entry per learning unit: a group as its members' short name with its learner and name, an agent
    alone as agent=learner; the rest of the line as without groups."""
    pytest.importorskip("mpe2")
    trainer = Trainer("mpe2.simple_tag_v3", learner="dqn", runner="sequential", steps=10, final_episodes=0,
                      options={"out_dir": None, "agent_groups": {"adversary": ["adversary_*"]}}, say=lambda _: None)
    trainer.build()
    line = trainer.describe()[0]
    assert line.startswith("training mpe2.simple_tag_v3 with the sequential runner: adversary_0..adversary_2 "
                           "(3 agents): dqn, group adversary; agent_0=dqn; learner dqn; "), line
    assert line.endswith("; scored against random") and line.count("adversary_") == 2, line
    alone = Trainer("mpe2.simple_tag_v3", learner="dqn", runner="sequential", steps=10, final_episodes=0,
                    options={"out_dir": None}, self_play=False, say=lambda _: None)
    alone.build()
    assert alone.describe()[0].startswith("training mpe2.simple_tag_v3 with the sequential runner: adversary_0=dqn, "
                                          "adversary_1=dqn, adversary_2=dqn, agent_0=dqn; learner dqn; ")


def test_an_env_without_a_recipe_gets_one_from_its_spaces_with_a_note():
    said = []
    trainer = Trainer("mpe2.simple_adversary_v3", steps=10, say=said.append, options={"out_dir": None})
    assert trainer.learners == "dqn" and trainer.config.agent_groups == {"agent": ["agent_*"]}
    assert said == trainer.notes and "has no recipe; chosen from its spaces" in said[0], said



def test_a_recipe_measured_on_vectors_gets_the_frame_rule_when_the_env_shows_frames():
    kaz = "pettingzoo.butterfly.knights_archers_zombies_v11"
    said = []
    frames = Trainer(kaz, steps=10, env_args={"obs_method": "image"}, say=said.append, options={"out_dir": None})
    assert frames.env.wrappers == IMAGE_WRAPPERS, "512x512 RGB crops are made grey, small and stacked"
    assert frames.learners == "ppo" and set(frames.config.agent_groups) == {"archers", "knights"}, "the recipe stays"
    assert any("recipe gives no frame preprocessing" in note and "--wrapper" in note for note in said), said
    assert Trainer(kaz, steps=10, options={"out_dir": None}).env.wrappers == (), "vector observations: nothing added"
    given = Trainer(kaz, steps=10, env_args={"obs_method": "image"}, wrappers=("resize_v1,x_size=32,y_size=32",),
                    options={"out_dir": None})
    assert given.env.wrappers == ("resize_v1,x_size=32,y_size=32",), "the user's wrappers are kept, none added"


@pytest.mark.parametrize("kwargs, error, message", [
    ({"steps": 0}, UserInputError, "--steps 0: must be >= 1"),
    ({"runner": "parallel"}, UserInputError, "runner 'parallel': must be one of"),
    ({"final_episodes": -1}, UserInputError, "--final-episodes -1: must be >= 0"),
    ({"options": {"seed": "x"}}, ConfigError, "option seed='x': must be an integer"),
    ({"learner": "dqn,lr=-1"}, ConfigError, None),
])
def test_bad_input_is_refused_before_anything_runs(kwargs, error, message, tmp_path):
    options = {"out_dir": str(tmp_path / "runs"), **kwargs.pop("options", {})}
    with pytest.raises(error, match=message):
        trainer = Trainer(TTT, options=options, **kwargs)
        trainer.build()  # the learner's options are checked when the run is planned
    assert not (tmp_path / "runs").exists()


def test_the_final_evaluations_note_names_the_unit_of_every_scoring_mode():
    from pzasync.evaluation.scoring import SCORING_MODES
    from pzasync.training.trainer import GAMES_PER

    assert set(GAMES_PER) == set(SCORING_MODES)
    assert GAMES_PER["team"] == "team and policy", "not 'tea and policy' (the mode's name cut by one letter)"
    assert GAMES_PER["sides"] == "side and policy"
