"""DQN's update by hand (networks.ManualNet, no autograd) against the autograd update it replaces: the same
targets, losses, gradients and parameters, option by option; and the networks it refuses to compute."""

from __future__ import annotations

import copy
import io
import pickle

import numpy as np
import pytest
import torch
from gymnasium import spaces

from pzasync.learners import LearnerContext
from pzasync.learners.dqn import DQNLearner
from pzasync.learners.networks import ManualNet
from pzasync.core.spaces import agent_layout

torch.set_num_threads(1)

VEC = agent_layout("agent_0", spaces.Box(-1, 1, (4,), np.float32), spaces.Discrete(3), info_mask=True)
BOARD = agent_layout("player_0", spaces.Box(0, 1, (6, 7, 2), np.int8), spaces.Discrete(7), info_mask=True)
PLANES = agent_layout("agent_0", spaces.Box(0, 1, (5, 9, 3), np.float32), spaces.Discrete(4, start=2))
UNMASKED = agent_layout("agent_0", spaces.Box(-1, 1, (6,), np.float32), spaces.Discrete(3, start=1))


def dqn(layout, **options):
    return DQNLearner(LearnerContext(layout.agent, layout, options, "cpu", 0))


def random_batch(layout, n, rng, **extra):
    shape, dtype = layout.obs_space.shape, layout.obs_space.dtype
    draw = (lambda: rng.integers(0, 2, (n, *shape)).astype(dtype)) if np.issubdtype(dtype, np.integer) \
        else (lambda: rng.uniform(-1, 1, (n, *shape)).astype(dtype))
    space = layout.action_space
    batch = {"obs": draw(), "next_obs": draw(), "action": rng.integers(space.start, space.start + space.n, n),
             "reward": rng.normal(size=n).astype(np.float32), "terminated": rng.random(n) < 0.2,
             "truncated": np.zeros(n, bool), "policy_version": np.zeros(n, np.int64), **extra}
    if layout.mask_shape is not None:
        batch["action_mask"] = rng.random((n, space.n)) < 0.7
        batch["next_action_mask"] = rng.random((n, space.n)) < 0.7
        batch["next_action_mask"][0] = False  # a next state without legal actions: no bootstrap
    return batch


CASES = [
    (BOARD, {"gamma": 0.9, "epsilon_end": 0.2, "mirror": True}, {}),  # pzasync train's connect_four learner
    (BOARD, {"torso": "mlp"}, {}),
    (BOARD, {"max_grad_norm": 0.01}, {}),  # clipping at every update
    (VEC, {}, {}),
    (VEC, {"activation": "tanh", "hidden": [16]}, {}),
    (VEC, {"hidden": []}, {}),
    (VEC, {"double": False}, {}),
    (VEC, {"clipped_double": True}, {}),
    (VEC, {"target_tau": 0.3}, {}),
    (VEC, {"target_update_interval": 2}, {}),
    (VEC, {"n_step": 3}, {"discount": "per row"}),
    (VEC, {}, {"weight": "per row"}),  # prioritized replay's importance weights
    (PLANES, {"torso": "cnn"}, {}),  # float board planes of another size; a Discrete start
    (UNMASKED, {}, {}),
]


@pytest.mark.parametrize("layout, options, extra", CASES, ids=[f"{c[0].agent}-{c[1]}-{sorted(c[2])}" for c in CASES])
def test_the_update_by_hand_takes_autograds_steps(layout, options, extra):
    by_hand, autograd = dqn(layout, **options), dqn(layout, **options)
    autograd.manual = None
    assert by_hand.manual is not None
    rng = np.random.default_rng(0)
    for step in range(6):
        n = 24 if step % 2 else 17
        more = {}
        if "discount" in extra:
            more["discount"] = (0.9 ** rng.integers(1, 4, n)).astype(np.float32)
        if "weight" in extra:
            more["weight"] = rng.uniform(0.1, 1, n).astype(np.float32)
        batch = random_batch(layout, n, rng, **more)
        torch.testing.assert_close(by_hand.compute_targets(batch), autograd.compute_targets(batch),
                                   rtol=1e-5, atol=1e-6)
        got, expected = by_hand.update(batch), autograd.update(batch)
        assert got.keys() == expected.keys()
        for key in expected:  # loss, q_mean, target_mean (the targets the update used), grad_norm
            assert got[key] == pytest.approx(expected[key], rel=1e-5, abs=1e-7), key
        for a, b in zip(by_hand.q.parameters(), autograd.q.parameters()):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-7)
        for a, b in zip(by_hand.target.parameters(), autograd.target.parameters()):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert by_hand.optimizer.state_dict()["state"][0]["step"] == 6


def test_the_update_by_hand_survives_gradients_replaced_and_state_loaded():
    learner, clone = dqn(BOARD, mirror=True), dqn(BOARD, mirror=True)
    rng = np.random.default_rng(1)
    for _ in range(3):
        learner.update(random_batch(BOARD, 16, rng))
    learner.optimizer.zero_grad(set_to_none=True)  # the gradient views are gone: made again
    learner.update(random_batch(BOARD, 16, rng))
    clone.load_state_dict(learner.state_dict())
    batch = random_batch(BOARD, 16, rng)
    assert learner.update(batch) == clone.update(batch)
    for a, b in zip(learner.q.parameters(), clone.q.parameters()):
        assert torch.equal(a, b)


@pytest.mark.parametrize("layout, options", [
    (VEC, {"dueling": True}), (VEC, {"layer_norm": True}),
    (agent_layout("agent_0", spaces.Box(0, 255, (40, 40, 3), np.uint8), spaces.Discrete(3)), {}),  # image CNN
    (agent_layout("agent_0", spaces.Dict({"a": spaces.Box(-1, 1, (2,)), "b": spaces.Discrete(3)}),
                  spaces.Discrete(2)), {}),  # two leaves, one of them one-hot
    (agent_layout("agent_0", spaces.Discrete(5), spaces.Discrete(2)), {}),
])
def test_networks_the_hand_does_not_compute_go_through_autograd(layout, options):
    learner = dqn(layout, **options)
    assert learner.manual is None


def test_manual_net_forward_and_backward_are_the_modules_and_autograds():
    torch.manual_seed(0)
    for layout, options in [(PLANES, {"torso": "cnn"}), (BOARD, {}), (VEC, {"activation": "tanh"})]:
        q = DQNLearner.build_policy(layout, DQNLearner.validate_config(layout.agent, options))
        net = ManualNet(q.encoder, q.head)
        rng = np.random.default_rng(2)
        obs = random_batch(layout, 9, rng)["obs"]
        with torch.no_grad():
            out, saved = net.forward(net.inputs([obs]), keep=5)
        expected = q({"obs": torch.as_tensor(obs)})
        torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-6)
        weights = torch.randn(5, expected.shape[1])
        q.zero_grad(set_to_none=True)
        (expected[:5] * weights).sum().backward()
        autograd = [p.grad.clone() for p in q.parameters()]
        for p in q.parameters():
            p.grad = torch.full_like(p, 7.0)  # overwritten, not added to
        with torch.no_grad():
            net.backward(saved, weights)
        for p, g in zip(q.parameters(), autograd):
            torch.testing.assert_close(p.grad, g, rtol=1e-4, atol=1e-6)


def test_board_channels_sets_the_board_filters_and_old_configs_keep_sixty_four():
    from pzasync.errors import ConfigError
    from pzasync.learners import networks

    learner = dqn(BOARD, board_channels=16)
    conv = learner.q.encoder.leaves[0].conv[0]
    assert conv.weight.shape[0] == 16 and learner.manual is not None
    rng = np.random.default_rng(3)
    assert np.isfinite(learner.update(random_batch(BOARD, 8, rng))["loss"])
    assert dqn(BOARD).q.encoder.leaves[0].conv[0].weight.shape[0] == networks.BOARD_CHANNELS
    old = {k: v for k, v in DQNLearner.validate_config("player_0", {}).items() if k != "board_channels"}
    assert DQNLearner.build_policy(BOARD, old).encoder.leaves[0].conv[0].weight.shape[0] == networks.BOARD_CHANNELS
    for bad in (0, True, 2.5):
        with pytest.raises(ConfigError, match="board_channels"):
            dqn(BOARD, board_channels=bad)


def test_the_update_by_hand_leaves_adams_state_and_its_checkpoint_continues_alike():
    by_hand, autograd = dqn(BOARD, mirror=True), dqn(BOARD, mirror=True)
    autograd.manual = None
    rng = np.random.default_rng(4)
    for _ in range(4):
        batch = random_batch(BOARD, 20, rng)
        by_hand.update(batch)
        autograd.update(batch)
    mine, theirs = by_hand.optimizer.state_dict()["state"], autograd.optimizer.state_dict()["state"]
    assert mine.keys() == theirs.keys()
    for key in theirs:
        assert mine[key]["step"] == theirs[key]["step"] == 4
        for name in ("exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(mine[key][name], theirs[key][name], rtol=1e-4, atol=1e-7)
    saved = io.BytesIO()
    torch.save(by_hand.state_dict(), saved)
    saved.seek(0)
    resumed = dqn(BOARD, mirror=True)
    resumed.load_state_dict(torch.load(saved))
    batch = random_batch(BOARD, 20, rng)
    assert resumed.update(batch) == by_hand.update(batch)
    for a, b in zip(resumed.q.parameters(), by_hand.q.parameters()):
        assert torch.equal(a, b)


def _module_act(q, obs, mask):
    """`QNetwork.act`'s greedy actions and Q-values through the modules (its forward by hand turned off)."""
    q.__dict__["_pzasync_acting"] = False
    try:
        with torch.inference_mode():
            values = q({"obs": torch.as_tensor(obs)}).clone()
        return q.act({"obs": obs}, mask, False)[0], values
    finally:
        q.__dict__.pop("_pzasync_acting")


@pytest.mark.parametrize("layout, options", [(BOARD, {}), (BOARD, {"torso": "mlp"}), (PLANES, {"torso": "cnn"}),
                                             (VEC, {"activation": "tanh"}), (UNMASKED, {})])
def test_acting_by_hand_takes_the_modules_actions_at_every_batch_size_and_after_loads(layout, options):
    from pzasync.learners import policy_to_vector, vector_to_policy

    config = DQNLearner.validate_config(layout.agent, options)
    q, other = DQNLearner.build_policy(layout, config), DQNLearner.build_policy(layout, config)
    rng = np.random.default_rng(3)
    for rows in [*range(1, 41), 1, 16]:  # more row counts than the 32 whose work tensors acting keeps
        batch = random_batch(layout, rows, rng)
        mask = batch.get("action_mask")
        actions, _ = q.act({"obs": batch["obs"]}, mask, False)
        assert q.__dict__["_pzasync_acting"], "the forward by hand was used"
        net, _key = q.__dict__["_pzasync_acting"]
        assert len(net._work) <= 32
        expected, values = _module_act(q, batch["obs"], mask)
        np.testing.assert_array_equal(actions, expected)
        with torch.inference_mode():
            by_hand, _ = net.forward(net.inputs([batch["obs"]]))
            torch.testing.assert_close(by_hand, values, rtol=1e-5, atol=1e-6)
    # A new policy vector (what the actor loads at every version) is what the next act computes with.
    vector_to_policy(policy_to_vector(other), q)
    batch = random_batch(layout, 7, rng)
    mask = batch.get("action_mask")
    expected_after_load = other.act({"obs": batch["obs"]}, mask, False)[0]
    np.testing.assert_array_equal(q.act({"obs": batch["obs"]}, mask, False)[0], expected_after_load)
    for copied in (copy.deepcopy(q), pickle.loads(pickle.dumps(q))):  # each makes its own, on its own parameters
        assert "_pzasync_acting" not in copied.__dict__
        np.testing.assert_array_equal(copied.act({"obs": batch["obs"]}, mask, False)[0], expected_after_load)
        assert copied.__dict__["_pzasync_acting"][0].weights[0][0] is copied.head[0].weight
    q.to("cpu")  # `.to()` may replace the parameters (another device): the forward by hand is made again
    assert "_pzasync_acting" not in q.__dict__
    np.testing.assert_array_equal(q.act({"obs": batch["obs"]}, mask, False)[0], _module_act(q, batch["obs"], mask)[0])


@pytest.mark.parametrize("options", [{"dueling": True}, {"layer_norm": True}])
def test_networks_the_hand_does_not_compute_act_through_the_modules(options):
    q = DQNLearner.build_policy(VEC, DQNLearner.validate_config(VEC.agent, options))
    batch = random_batch(VEC, 4, np.random.default_rng(0))
    actions, _ = q.act({"obs": batch["obs"]}, batch["action_mask"], False)
    assert q.__dict__["_pzasync_acting"] is False
    np.testing.assert_array_equal(actions, _module_act(q, batch["obs"], batch["action_mask"])[0])
