"""Storage layouts from gymnasium spaces: dtypes kept, masks split out, unsupported spaces named."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces

import pzasync
from pzasync.core.spaces import agent_layout
from pzasync.errors import UnsupportedSpaceError


def test_image_box_keeps_uint8_and_shape():
    layout = agent_layout("piston_0", spaces.Box(0, 255, (84, 84, 3), np.uint8), spaces.Discrete(3))
    (leaf,) = layout.obs_leaves
    assert leaf.shape == (84, 84, 3) and leaf.dtype == np.uint8
    assert not layout.nested_obs and not layout.has_mask


def test_nested_dict_and_tuple_leaves_in_their_own_dtypes():
    space = spaces.Dict({
        "image": spaces.Box(0, 255, (4, 4, 1), np.uint8),
        "state": spaces.Tuple((spaces.Discrete(5), spaces.MultiDiscrete([2, 3]), spaces.MultiBinary(4))),
    })
    layout = agent_layout("a", space, spaces.Box(-1, 1, (2,), np.float32))
    got = {leaf.name: (leaf.shape, leaf.dtype) for leaf in layout.obs_leaves}
    assert got == {
        "image": ((4, 4, 1), np.dtype(np.uint8)),
        "state/0": ((), np.dtype(np.int64)),
        "state/1": ((2,), np.dtype(np.int64)),
        "state/2": ((4,), np.dtype(np.int8)),
    }
    obs = space.sample()
    leaves = layout.leaves_of(layout.copy_obs(obs))
    np.testing.assert_array_equal(leaves[0], obs["image"])
    assert leaves[3].dtype == np.int8


def test_mask_in_observation_dict_is_split_out():
    space = spaces.Dict({"observation": spaces.Box(0, 1, (3, 3, 2), np.int8),
                         "action_mask": spaces.Box(0, 1, (9,), np.int8)})
    layout = agent_layout("player_1", space, spaces.Discrete(9))
    assert layout.mask_in_obs and layout.mask_shape == (9,)
    assert layout.obs_space == space["observation"]
    mask = np.zeros(9, np.int8)
    mask[4] = 1
    obs, got_mask = layout.split({"observation": np.ones((3, 3, 2), np.int8), "action_mask": mask}, {})
    assert obs.shape == (3, 3, 2) and got_mask.dtype == bool and got_mask.tolist() == mask.astype(bool).tolist()


def test_mask_in_info_and_missing_mask_means_all_legal():
    layout = agent_layout("a", spaces.Box(0, 1, (2,)), spaces.Discrete(4), info_mask=True)
    _, mask = layout.split(np.zeros(2, np.float32), {"action_mask": np.array([1, 0, 0, 1], np.int8)})
    assert mask.tolist() == [True, False, False, True]
    _, mask = layout.split(np.zeros(2, np.float32), {})
    assert mask.tolist() == [True] * 4


def test_split_copies_so_env_reuse_of_arrays_cannot_alter_records():
    layout = agent_layout("a", spaces.Box(0, 1, (2,), np.float32), spaces.Discrete(2))
    raw = np.zeros(2, np.float32)
    obs, _ = layout.split(raw, {})
    raw[:] = 1
    assert obs.tolist() == [0, 0]


@pytest.mark.parametrize(
    "space, role",
    [
        (spaces.Text(5), "observation"),
        (spaces.Graph(spaces.Box(0, 1, (2,)), None), "observation"),
        (spaces.Sequence(spaces.Discrete(2)), "observation"),
    ],
)
def test_unsupported_observation_space_names_agent_and_space(space, role):
    with pytest.raises(UnsupportedSpaceError, match=rf"agent 'walker_2': {role} space .*{type(space).__name__}"):
        agent_layout("walker_2", space, spaces.Discrete(2))


def test_unsupported_nested_leaf_names_its_path():
    space = spaces.Dict({"ok": spaces.Discrete(2), "bad": spaces.Text(4)})
    with pytest.raises(UnsupportedSpaceError, match=r"agent 'x'.*\(at 'bad'\)"):
        agent_layout("x", space, spaces.Discrete(2))


def test_nested_action_space_refused():
    with pytest.raises(UnsupportedSpaceError, match=r"agent 'x': action space .* is nested"):
        agent_layout("x", spaces.Box(0, 1, (1,)), spaces.Tuple((spaces.Discrete(2), spaces.Discrete(2))))


def test_env_layouts_for_connect_four():
    env = pzasync.make_env("pettingzoo.classic.connect_four_v3")
    layouts = pzasync.env_layouts(env)
    assert set(layouts) == {"player_0", "player_1"}
    layout = layouts["player_0"]
    assert layout.obs_leaves[0].shape == (6, 7, 2) and layout.obs_leaves[0].dtype == np.int8
    assert layout.mask_shape == (7,)


def test_uniform_legal_draws_what_rng_choice_draws_and_only_legal_actions():
    """A random player's move: the same index, from the same generator state, as rng.choice over the legal ones."""
    from pzasync.core.spaces import uniform_legal

    masks = np.random.default_rng(0).integers(0, 2, size=(500, 9)).astype(np.int8)
    masks[masks.sum(axis=1) == 0, 4] = 1
    ours, numpys = np.random.default_rng(11), np.random.default_rng(11)
    drawn = [uniform_legal(ours, m) for m in masks]
    assert drawn == [int(numpys.choice(np.flatnonzero(m))) for m in masks]
    assert all(m[a] for m, a in zip(masks, drawn))
    assert len(set(drawn)) == 9
