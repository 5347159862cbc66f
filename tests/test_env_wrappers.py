"""Env wrappers named by text (pzasync/core/wrappers.py, EnvSpec.wrappers): applied in order wherever the env is
made, carried to other processes, recorded in run.json and rebuilt from it; a bad one is refused by name."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from pzasync.config import RunConfig
from pzasync.core.environments import EnvSpec
from pzasync.core.wrappers import parse_wrapper
from pzasync.errors import EnvSpecError
from pzasync.evaluation.evaluate import load_run_policies
from pzasync.runners import SequentialRunner

PISTONBALL = "pettingzoo.butterfly.pistonball_v6"
SMALL_FRAMES = ("color_reduction_v0,mode=B", "resize_v1,x_size=16,y_size=16", "frame_stack_v1,stack_size=2")


#: Envs `wrap_and_count` wrapped in this process.
WRAPPED: list[str] = []


def wrap_and_count(env):
    """A user's wrapper named as 'module:callable' (this test module): PettingZoo's base wrapper, counted."""
    from pettingzoo.utils import BaseWrapper

    WRAPPED.append(type(env).__name__)
    return BaseWrapper(env)


def test_a_wrapper_spec_reads_like_a_learner_spec():
    assert parse_wrapper("resize_v1,x_size=84,y_size=84") == ("resize_v1", {"x_size": 84, "y_size": 84})
    assert parse_wrapper("color_reduction_v0,mode=B") == ("color_reduction_v0", {"mode": "B"})
    assert parse_wrapper("pkg.mod:wrap") == ("pkg.mod:wrap", {})


def test_supersuit_wrappers_apply_in_order_and_survive_pickling():
    spec = EnvSpec.of(PISTONBALL, SMALL_FRAMES, n_pistons=3)
    env = pickle.loads(pickle.dumps(spec)).make()
    env.reset(seed=0)
    space = env.observation_space("piston_0")
    assert space.shape == (16, 16, 2) and space.dtype == np.uint8
    assert env.observe("piston_0").shape == (16, 16, 2)
    env.close()
    assert EnvSpec.of(spec, ("frame_stack_v1,stack_size=4",)).wrappers == (*SMALL_FRAMES, "frame_stack_v1,stack_size=4")


@pytest.mark.parametrize("wrapper, named", [("no_such_wrapper_v0", "no_such_wrapper_v0"),
                                            ("resize_v1,x_size=16", "resize_v1"),
                                            ("no.such.module:wrap", "no.such.module")])
def test_a_bad_wrapper_is_refused_by_name(wrapper, named):
    with pytest.raises(EnvSpecError, match=named.replace(".", r"\.")):
        EnvSpec.of(PISTONBALL, (wrapper,), n_pistons=3).make()


def test_a_run_records_its_wrappers_and_its_checkpoints_are_evaluated_on_the_same_env(tmp_path):
    import json

    spec = EnvSpec.of("mpe2.simple_spread_v3", (f"{__name__}:wrap_and_count",), N=2, max_cycles=10)
    result = SequentialRunner(spec, "ppo", RunConfig(seed=0, out_dir=str(tmp_path), progress=False,
                                                    agent_groups={"team": ["agent_*"]})).run(agent_steps=600)
    recorded = json.loads((Path(result.run_dir) / "run.json").read_text())
    assert recorded["env_wrappers"] == [f"{__name__}:wrap_and_count"]
    assert EnvSpec.of_run(recorded).wrappers == spec.wrappers
    before = len(WRAPPED)
    assert set(load_run_policies(result.run_dir)) == {"agent_0", "agent_1"}
    assert len(WRAPPED) > before  # the evaluation made the env through the recorded wrapper


def test_pzasync_train_takes_wrappers_that_replace_the_recipes_and_records_them(tmp_path):
    from click.testing import CliRunner

    from pzasync.cli import main

    args = ["train", PISTONBALL, "--env-arg", "n_pistons=3", "--env-arg", "max_cycles=5", "--wrapper",
            "color_reduction_v0,mode=B", "--wrapper", "resize_v1,x_size=16,y_size=16", "--runner", "sequential",
            "--steps", "60", "--final-episodes", "0", "--eval-every", "0", "--envs-per-actor", "1", "--out",
            str(tmp_path)]
    result = CliRunner().invoke(main, args, env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    assert "env wrappers color_reduction_v0,mode=B | resize_v1,x_size=16,y_size=16" in " ".join(result.output.split())
    import json

    (run_json,) = tmp_path.glob("*/run.json")
    assert json.loads(run_json.read_text())["env_wrappers"] == ["color_reduction_v0,mode=B",
                                                                "resize_v1,x_size=16,y_size=16"]
