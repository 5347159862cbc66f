"""DQN's fast path (learners/by_hand.py) against its plain form: the network's forward and backward by hand equal
the modules' forward and autograd's gradients, and whole updates by hand equal updates through autograd."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from pzasync.core.spaces import AgentLayout, agent_layout
from pzasync.learners.base import LearnerContext
from pzasync.learners.by_hand import ManualNet
from pzasync.learners.dqn import DQNLearner, QNetwork

BOARD = spaces.Dict({"observation": spaces.Box(0, 1, (6, 7, 2), np.int8),
                     "action_mask": spaces.Box(0, 1, (7,), np.int8)})
FLAT = spaces.Box(-1.0, 1.0, (18,), np.float32)


def layout(space: spaces.Space, actions: int, agent: str = "a") -> AgentLayout:
    return agent_layout(agent, space, spaces.Discrete(actions))


def observations(lay: AgentLayout, rows: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    space = lay.obs_space
    if space.dtype == np.int8:
        return rng.integers(0, 2, (rows, *space.shape)).astype(np.int8)
    return rng.uniform(-1, 1, (rows, *space.shape)).astype(np.float32)


CASES = [pytest.param(BOARD, {}, id="board-relu"), pytest.param(FLAT, {}, id="flat-relu"),
         pytest.param(FLAT, {"activation": "tanh", "hidden": [32, 16, 8]}, id="flat-tanh")]


@pytest.mark.parametrize("space, options", CASES)
def test_the_forward_and_backward_by_hand_are_the_modules_and_autograds(space, options):
    lay = layout(space, 7)
    torch.manual_seed(0)
    net = QNetwork(lay, DQNLearner.checked("a", options))
    assert ManualNet.supports(net.encoder, net.head)
    by_hand = ManualNet(net.encoder, net.head)
    obs = observations(lay, 11, 1)
    key = net.encoder.keys[0]
    expected = net({key: torch.as_tensor(obs)})
    with torch.no_grad():  # nothing by hand is recorded for autograd
        out, saved = by_hand.forward(by_hand.inputs([obs]), keep=11)
    torch.testing.assert_close(out, expected.detach(), rtol=1e-5, atol=1e-5)
    grad_out = torch.as_tensor(np.random.default_rng(2).normal(size=out.shape).astype(np.float32))
    (expected * grad_out).sum().backward()
    autograd = [p.grad.clone() for p in net.parameters()]
    for p in net.parameters():
        p.grad = torch.full_like(p, 7.0)  # overwritten, not added to
    with torch.no_grad():
        by_hand.backward(saved, grad_out)
    for (name, p), g in zip(net.named_parameters(), autograd):
        torch.testing.assert_close(p.grad, g, rtol=1e-4, atol=1e-5, msg=name)


def test_what_the_fast_path_does_not_compute_stays_on_autograd():
    lay = layout(FLAT, 5)
    assert not ManualNet.supports(QNetwork(lay, DQNLearner.checked("a", {"dueling": True})).encoder,
                                  QNetwork(lay, DQNLearner.checked("a", {"dueling": True})).head)
    net = QNetwork(lay, DQNLearner.checked("a", {"layer_norm": True}))
    assert not ManualNet.supports(net.encoder, net.head)
    assert DQNLearner(LearnerContext("a", lay, {"layer_norm": True})).by_hand is None
    assert DQNLearner(LearnerContext("a", lay, {})).by_hand is not None
    plain = DQNLearner(LearnerContext("a", lay, {"by_hand": False}))  # the option turns both paths off
    assert plain.by_hand is None and plain.q._acting_by_hand() is None
    assert DQNLearner(LearnerContext("a", lay, {})).q._acting_by_hand() is not None


def batch_of(lay: AgentLayout, rows: int, seed: int, weights: bool = False, discount: bool = False) -> dict:
    rng = np.random.default_rng(seed)
    key = "obs" if not lay.nested_obs else None
    batch = {"obs": observations(lay, rows, seed), "next_obs": observations(lay, rows, seed + 1),
             "action": rng.integers(0, lay.action_space.n, rows), "reward": rng.normal(size=rows).astype(np.float32),
             "terminated": rng.random(rows) < 0.2}
    assert key == "obs"
    if lay.mask_shape is not None:
        mask = rng.random((rows, lay.action_space.n)) < 0.7
        mask[:, 0] = True
        batch["next_action_mask"] = mask
    if weights:
        batch["weight"] = rng.uniform(0.2, 1.0, rows).astype(np.float32)
    if discount:
        batch["discount"] = (0.99 ** rng.integers(1, 4, rows)).astype(np.float32)
    return batch


@pytest.mark.parametrize("options, weights, discount", [
    ({}, False, False), ({"double": False, "lr": 3e-3}, False, False), ({"clipped_double": True}, True, True),
    ({"target_tau": 0.05, "max_grad_norm": 0.01}, False, False)],
    ids=["default", "not-double", "clipped-weighted-nstep", "soft-target-clipped-grads"])
def test_updates_by_hand_equal_updates_through_autograd(options, weights, discount):
    """Two learners built alike take the same batches, one by hand, one through autograd: their parameters, target
    networks and metrics stay equal (to float rounding) over many updates."""
    lay = layout(BOARD, 7)
    learners = [DQNLearner(LearnerContext("a", lay, {**options, "target_update_interval": 3}, seed=4))
                for _ in range(2)]
    learners[1].by_hand = None
    assert learners[0].by_hand is not None
    for step in range(12):
        batch = batch_of(lay, 32, step, weights, discount)
        fast, plain = (learner.update(batch) for learner in learners)
        for name in plain:
            assert fast[name] == pytest.approx(plain[name], rel=1e-4, abs=1e-5), (step, name)
    for net in ("q", "target"):
        for (name, a), b in zip(getattr(learners[0], net).named_parameters(), getattr(learners[1], net).parameters()):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=f"{net}.{name}")


def test_the_fused_adam_step_equals_torchs_loop_and_their_checkpoints_resume_in_each_other():
    """fused_adam=True (torch.optim.Adam(fused=True)) against False (torch's loop over the parameters): learners
    built alike take the same batches and stay equal to float rounding; a checkpoint of one resumes in the other."""
    lay = layout(BOARD, 7)

    def learner(fused: bool) -> DQNLearner:
        return DQNLearner(LearnerContext("a", lay, {"fused_adam": fused, "target_update_interval": 3}, seed=4))

    fused, plain = learner(True), learner(False)
    start = learner(True).q.state_dict()
    assert fused.optimizer.defaults["fused"] and not plain.optimizer.defaults["fused"]
    for step in range(12):
        batch = batch_of(lay, 32, step, False, False)
        a, b = fused.update(batch), plain.update(batch)
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-4, abs=1e-5), step
    for (name, x), y in zip(fused.q.named_parameters(), plain.q.parameters()):
        torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-5, msg=name)
        assert not torch.equal(x, start[name]), f"{name} never moved"
    for source, target in ((fused, learner(False)), (plain, learner(True))):
        target.load_state_dict(source.state_dict())
        batch = batch_of(lay, 32, 99, False, False)
        assert target.update(batch)["loss"] == pytest.approx(source.update(batch)["loss"], rel=1e-4, abs=1e-5)
        for x, y in zip(target.q.parameters(), source.q.parameters()):
            torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-5)
