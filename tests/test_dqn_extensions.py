"""DQN extensions: windowed sampling (untorn under a writer), n-step targets along one member's trajectory,
the dueling head, soft and hard target updates, and the convolutional board torso."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from gymnasium import spaces
from proc_helpers import write_numbered_transitions

from pzasync import RunConfig, SequentialRunner, SharedRingBuffer
from pzasync.core.spaces import agent_layout
from pzasync.core.transitions import Transition
from pzasync.errors import ConfigError
from pzasync.learners import LearnerContext, networks, policy_to_vector, vector_to_policy
from pzasync.learners.dqn import DQNLearner, DuelingHead, mirror_batch, nstep_window
from pzasync.learners.networks import BoardEncoder, Encoder, FlatEncoder, ImageEncoder, auto_torso
from pzasync.learners.ppo import PPOLearner

torch.set_num_threads(1)

VEC = agent_layout("agent_0", spaces.Box(-100, 100, (4,), np.float32), spaces.Discrete(3), info_mask=True)
BOARD = agent_layout("player_0", spaces.Box(0, 1, (6, 7, 2), np.int8), spaces.Discrete(7), info_mask=True)
Q_NEXT = 10.0  # every Q(s', .) is [1, 2, 10]: the best legal next action is worth 10


def dqn(layout=VEC, members=(), **options):
    return DQNLearner(LearnerContext(layout.agent, layout, options, "cpu", 0, members=list(members)))


def constant_q(learner, values=(1.0, 2.0, Q_NEXT)):
    with torch.no_grad():
        for net in (learner.q, learner.target):
            net.head[-1].weight.zero_()
            net.head[-1].bias.copy_(torch.tensor(values))


# ------------------------------------------------------------------------------- window sampling, torn rows
OBS = 4096  # large rows make a concurrent overwrite during a copy likely


@pytest.mark.timeout(60)
def test_window_sampler_never_hands_out_torn_or_stale_rows_under_a_flat_out_writer(spawn_ctx):
    layout = agent_layout("a", spaces.Box(-np.inf, np.inf, (OBS,), np.float32), spaces.Discrete(5))
    buf = SharedRingBuffer.create(layout, 32)
    start = spawn_ctx.Event()
    writer = spawn_ctx.Process(target=write_numbered_transitions, args=(buf, 30_000, layout, start))
    writer.start()
    rng = np.random.default_rng(1)
    batches = valid_seen = invalid_seen = 0
    try:
        start.set()
        while buf.written == 0:
            time.sleep(0.001)
        deadline = time.monotonic() + 5
        while (writer.is_alive() or batches < 5) and time.monotonic() < deadline:
            window, valid = buf.sample_windows(8, 5, rng)
            assert window["obs"].shape == (8, 6, OBS) and valid.shape == (8, 6) and valid[:, 0].all()
            # Every field of row i encodes i; invalid positions may hold the NaN sentinel (never looked at).
            index = np.where(valid, window["reward"], -1).astype(np.int64)
            v = valid
            assert (window["obs"][v] == index[v][:, None]).all(), "obs mixed with another transition"
            assert (window["next_obs"][v] == index[v][:, None] + 1).all()
            assert (window["action"][v] == index[v] % 5).all() and (window["policy_version"][v] == index[v]).all()
            assert (window["terminated"][v] == (index[v] % 3 == 0)).all()
            assert (window["truncated"][v] == (index[v] % 3 == 1)).all()
            # A valid position k holds exactly the k-th transition after the start one.
            assert (index[v] == (index[:, :1] + np.arange(6))[v]).all(), "a window row is not t + k"
            valid_seen += int(v.sum())
            invalid_seen += int((~v).sum())
            batches += 1
        writer.join(timeout=30)
    finally:
        writer.join(timeout=30)
        buf.close()
        buf.unlink()
    assert writer.exitcode == 0
    assert batches > 50 and valid_seen > 1000 and invalid_seen > 0, (batches, valid_seen, invalid_seen)


def test_window_rows_past_the_newest_or_overwritten_are_invalid():
    buf = SharedRingBuffer.create(VEC, 8)
    try:
        for i in range(11):  # rows 3..10 live; 0..2 overwritten
            write(buf, obs=i, next_obs=i + 1, reward=i)
        window, valid = buf.sample_windows(400, 3, np.random.default_rng(0))
        start = window["reward"][:, 0].astype(int)
        assert set(start.tolist()) == set(range(3, 11)), "starts are drawn among the rows still held"
        expected = (start[:, None] + np.arange(4)) <= 10
        np.testing.assert_array_equal(valid, expected)
        with pytest.raises(ConfigError, match="window"):
            buf.sample_windows(4, 8, np.random.default_rng(0))
    finally:
        buf.close()
        buf.unlink()


# ------------------------------------------------------------------------------- n-step targets by hand
def state(label):
    return np.array([label, 0, 0, 0], np.float32)


def write(buf, obs, next_obs, reward, terminated=False, truncated=False, member=None):
    extras = {"policy_version": 1} if member is None else {"policy_version": 1, "member": member}
    mask = np.ones(3, bool)
    buf.write(Transition("a", state(obs), 0, float(reward), state(next_obs), terminated, truncated, mask, mask,
                         extras))


def targets_by_start(learner, buf):
    """Sample many windows; map each start row (told by its obs label) to the learner's target for it."""
    learner.batch_size = 2000
    batch = learner.sample(buf, np.random.default_rng(0))
    targets = learner.compute_targets(batch).numpy()
    out: dict[int, float] = {}
    for label, target in zip(batch["obs"][:, 0].astype(int).tolist(), targets.tolist()):
        assert out.setdefault(label, target) == target, "one start row, one target"
    return out, batch


def test_nstep_targets_of_a_single_agent_stop_at_episode_ends_cuts_and_gaps():
    buf = SharedRingBuffer.create(VEC, 64)
    try:
        # Episode A: 10 -> 11 -> 12 -> 13, terminated on its 3rd step.
        write(buf, 10, 11, 1)
        write(buf, 11, 12, 2)
        write(buf, 12, 13, 4, terminated=True)
        # Episode B, cut by the actor (truncated) after 2 steps.
        write(buf, 20, 21, 1)
        write(buf, 21, 22, 1, truncated=True)
        # Episode C: 30 -> ... -> 34, then a row that does not continue it (34 != 40) with no flag at all.
        write(buf, 30, 31, 8)
        write(buf, 31, 32, 0)
        write(buf, 32, 33, 1)
        write(buf, 33, 34, 2)
        write(buf, 40, 41, 1)
        write(buf, 41, 42, 1)
        # Ends that the observations alone would not show: the next episode starts where the last one ended.
        write(buf, 49, 50, 1)
        write(buf, 50, 51, 1, truncated=True)
        write(buf, 51, 52, 1)
        write(buf, 59, 60, 1)
        write(buf, 60, 61, 1, terminated=True)
        write(buf, 61, 62, 1)  # the newest row: nothing after it yet
        learner = dqn(n_step=3, gamma=0.5)
        constant_q(learner)
        got, batch = targets_by_start(learner, buf)
        g, q = 0.5, Q_NEXT
        expected = {
            10: 1 + g * 2 + g**2 * 4,          # 3 steps, the last terminated: no bootstrap
            11: 2 + g * 4,                     # stops at the termination
            12: 4.0,
            20: 1 + g * 1 + g**2 * q,          # truncated on the 2nd step: bootstraps from 22 with gamma^2
            21: 1 + g * q,
            30: 8 + g * 0 + g**2 * 1 + g**3 * q,
            31: 0 + g * 1 + g**2 * 2 + g**3 * q,
            32: 1 + g * 2 + g**2 * q,          # 40 does not continue 33 -> 34: 2 steps
            33: 2 + g * q,
            40: 1 + g * 1 + g**2 * q,          # 49 does not continue 41 -> 42
            41: 1 + g * q,
            49: 1 + g * 1 + g**2 * q,          # stops at the truncation, though row 51 starts at its next_obs
            50: 1 + g * q,
            51: 1 + g * q,
            59: 1 + g * 1,                     # stops at the termination, likewise
            60: 1.0,
            61: 1 + g * q,                     # the window runs past the newest row
        }
        assert set(got) == set(expected)
        for label, value in expected.items():
            assert got[label] == pytest.approx(value, rel=1e-6), label
        steps = dict(zip(batch["obs"][:, 0].astype(int).tolist(), batch["nstep"].tolist()))
        assert steps[10] == 3 and steps[12] == 1 and steps[20] == 2 and steps[32] == 2 and steps[41] == 1
        metrics = learner.update({k: v[:64] for k, v in batch.items()})
        assert 1 <= metrics["nstep_mean"] <= 3 and np.isfinite(metrics["loss"])
    finally:
        buf.close()
        buf.unlink()


def test_nstep_targets_of_a_group_follow_one_member_through_interleaved_rows():
    buf = SharedRingBuffer.create(VEC, 64, extras={"member": "int16"})
    try:
        write(buf, 10, 11, 1, member=0)
        write(buf, 50, 51, 100, member=1)
        write(buf, 11, 12, 2, member=0)
        write(buf, 51, 52, 200, member=1, terminated=True)
        write(buf, 12, 13, 4, member=0)
        write(buf, 13, 14, 8, member=0)     # member 1 is out: member 0's rows now follow each other
        write(buf, 60, 61, 300, member=1)   # member 1's next episode
        write(buf, 14, 15, 16, member=0, truncated=True)
        learner = dqn(members=["p0", "p1"], n_step=3, gamma=0.5)
        assert learner.window == nstep_window(3, 2) == 8
        constant_q(learner)
        got, _batch = targets_by_start(learner, buf)
        g, q = 0.5, Q_NEXT
        expected = {
            10: 1 + g * 2 + g**2 * 4 + g**3 * q,   # skips member 1's rows
            50: 100 + g * 200,                     # member 1 terminated
            11: 2 + g * 4 + g**2 * 8 + g**3 * q,
            51: 200.0,
            12: 4 + g * 8 + g**2 * 16 + g**3 * q,
            13: 8 + g * 16 + g**2 * q,             # the truncated step is the last one used
            60: 300 + g * q,                       # member 0's row skipped, then nothing written after
            14: 16 + g * q,
        }
        assert set(got) == set(expected)
        for label, value in expected.items():
            assert got[label] == pytest.approx(value, rel=1e-6), label
    finally:
        buf.close()
        buf.unlink()


def test_one_step_is_exactly_the_old_one_step_target():
    buf = SharedRingBuffer.create(VEC, 64)
    try:
        rng = np.random.default_rng(3)
        for i in range(40):
            write(buf, i, i + 100, rng.normal(), terminated=i % 7 == 6, truncated=i % 11 == 10)
        one = dqn(gamma=0.9)
        torch.manual_seed(5)
        with torch.no_grad():
            for p in one.target.parameters():
                p.add_(torch.randn_like(p) * 0.1)  # online and target differ, so both matter
        batch = one.sample(buf, np.random.default_rng(0))
        assert "discount" not in batch, "n_step=1 samples plain rows"
        plain = buf.sample(one.batch_size, np.random.default_rng(0))
        assert all(np.array_equal(batch[k], plain[k]) for k in plain)
        old = one.compute_targets(plain)
        with torch.no_grad():
            nxt = {"obs": torch.as_tensor(plain["next_obs"])}
            best = one.q(nxt).argmax(1, keepdim=True)
            by_hand = (torch.as_tensor(plain["reward"]) + 0.9 * (1 - torch.as_tensor(plain["terminated"]).float())
                       * one.target(nxt).gather(1, best).squeeze(1))
        assert torch.equal(old, by_hand)
        # The n-step machinery with n_step=1 (windows of 0 rows) gives the same targets.
        from pzasync.learners.dqn import nstep_batch

        window, valid = buf.sample_windows(one.batch_size, 0, np.random.default_rng(0))
        reduced = nstep_batch(window, valid, 1, 0.9, ["obs"], False)
        assert np.array_equal(reduced["obs"], plain["obs"]) and (reduced["nstep"] == 1).all()
        torch.testing.assert_close(one.compute_targets(reduced), old, rtol=0, atol=1e-6)
    finally:
        buf.close()
        buf.unlink()


def test_clipped_double_bootstraps_from_the_lower_of_the_two_networks_values():
    """clipped_double: the online network still picks the next action; its value is the smaller of the
    target's and the online network's, so it is never above plain double DQN's and equals the online value
    where the online network is the lower one."""
    plain, clipped = dqn(gamma=0.9), dqn(gamma=0.9, clipped_double=True)
    torch.manual_seed(5)
    with torch.no_grad():  # two unrelated networks: each is the lower one on some rows
        for net in (plain.q, plain.target):
            for p in net.parameters():
                p.copy_(torch.randn_like(p) * 0.3)
    clipped.q.load_state_dict(plain.q.state_dict())
    clipped.target.load_state_dict(plain.target.state_dict())
    rng = np.random.default_rng(3)
    batch = {"next_obs": rng.normal(size=(64, 4)).astype(np.float32), "reward": rng.normal(size=64).astype(np.float32),
             "terminated": np.arange(64) % 7 == 6, "next_action_mask": rng.random((64, 3)) < 0.7}
    batch["next_action_mask"][:, 0] = True
    with torch.no_grad():
        nxt = {"obs": torch.as_tensor(batch["next_obs"])}
        online, target = plain.q(nxt), plain.target(nxt)
        best = online.masked_fill(~torch.as_tensor(batch["next_action_mask"]), -1e9).argmax(1, keepdim=True)
        lower = torch.minimum(online.gather(1, best), target.gather(1, best)).squeeze(1)
        alive = 1 - torch.as_tensor(batch["terminated"]).float()
        by_hand = torch.as_tensor(batch["reward"]) + 0.9 * alive * lower
    got, double = clipped.compute_targets(batch), plain.compute_targets(batch)
    torch.testing.assert_close(got, by_hand, rtol=0, atol=1e-6)
    assert (got <= double + 1e-6).all() and (got < double - 1e-4).any() and (got == double).any()


def test_runners_sample_through_the_learner_hook():
    config = RunConfig(seed=0, agent_groups={"both": ["p*"]}, sequential_replay_ratio=0.5)
    learners = {"both": ("dqn", {"n_step": 3, "learning_starts": 16, "batch_size": 8, "hidden": [8]})}
    result = SequentialRunner("tests.scripted_env:env", learners, config).run(agent_steps=120)
    metrics = result.agents["p0"].last_metrics
    assert result.agents["p0"].updates > 10
    assert 1.0 < metrics["nstep_mean"] <= 3.0, metrics


# ------------------------------------------------------------------------------- dueling, target updates
def test_dueling_head_is_value_plus_centred_advantage_and_masks_still_apply():
    learner = dqn(dueling=True)
    head = learner.q.head
    assert isinstance(head, DuelingHead)
    with torch.no_grad():
        for layer, bias in ((head.value, [5.0]), (head.advantage, [1.0, 2.0, 6.0])):
            layer.weight.zero_()
            layer.bias.copy_(torch.tensor(bias))
    obs = {"obs": torch.zeros(2, 4)}
    assert learner.q(obs).tolist() == [[3.0, 4.0, 8.0]] * 2  # 5 + A - mean(A) = 5 + A - 3
    actions, _ = learner.q.act({"obs": np.zeros((2, 4), np.float32)}, np.array([[1, 1, 0], [1, 0, 0]], bool), False)
    assert actions.tolist() == [1, 0]
    other = dqn(dueling=True)
    vector_to_policy(policy_to_vector(learner.q), other.q)
    assert torch.equal(other.q(obs), learner.q(obs))
    assert not hasattr(dqn().q.head, "advantage"), "dueling is off by default"


@pytest.mark.parametrize("dueling", [False, True])
def test_layer_norm_normalises_every_hidden_layer_and_its_vector_round_trips(dueling):
    """layer_norm: each hidden layer's pre-activations have zero mean and unit variance per row (LayerNorm's
    scale 1 and shift 0 at the start), the output layer is left alone, and the policy vector carries the
    norms' learned scale and shift."""
    learner = dqn(layer_norm=True, dueling=dueling, hidden=[16, 8])
    trunk = learner.q.head.trunk if dueling else learner.q.head
    norms = [m for m in trunk if isinstance(m, torch.nn.LayerNorm)]
    assert [n.normalized_shape for n in norms] == [(16,), (8,)]
    seen = []
    hooks = [n.register_forward_hook(lambda _m, _i, out: seen.append(out.detach())) for n in norms]
    learner.q({"obs": torch.as_tensor(np.random.default_rng(0).normal(size=(5, 4)) * 50, dtype=torch.float32)})
    for h in hooks:
        h.remove()
    for out in seen:
        torch.testing.assert_close(out.mean(dim=1), torch.zeros(5), atol=1e-5, rtol=0)
        torch.testing.assert_close(out.var(dim=1, unbiased=False), torch.ones(5), atol=1e-3, rtol=0)
    rng = np.random.default_rng(0)
    learner.update(random_batch(32, rng))
    assert any(not torch.equal(n.weight, torch.ones_like(n.weight)) for n in norms), "the scales are learned"
    other = dqn(layer_norm=True, dueling=dueling, hidden=[16, 8])
    vector_to_policy(policy_to_vector(learner.q), other.q)
    obs = {"obs": torch.zeros(2, 4)}
    assert torch.equal(other.q(obs), learner.q(obs))
    assert not any(isinstance(m, torch.nn.LayerNorm) for m in dqn().q.modules()), "off by default"


def random_batch(n, rng):
    return {"obs": rng.uniform(-1, 1, (n, 4)).astype(np.float32),
            "next_obs": rng.uniform(-1, 1, (n, 4)).astype(np.float32),
            "action": rng.integers(0, 3, n), "reward": rng.normal(size=n).astype(np.float32),
            "terminated": np.zeros(n, bool), "truncated": np.zeros(n, bool), "action_mask": np.ones((n, 3), bool),
            "next_action_mask": np.ones((n, 3), bool), "policy_version": np.ones(n, np.int64)}


def params(net):
    return [p.detach().clone() for p in net.parameters()]


def test_soft_target_update_moves_the_target_by_tau_after_every_update():
    rng = np.random.default_rng(0)
    learner = dqn(target_tau=0.25, target_update_interval=1000, dueling=True)
    for _ in range(3):
        before = params(learner.target)
        learner.update(random_batch(32, rng))
        online = params(learner.q)
        for t0, t1, o in zip(before, params(learner.target), online):
            torch.testing.assert_close(t1, t0 + 0.25 * (o - t0), rtol=0, atol=1e-6)
        assert any(not torch.equal(a, b) for a, b in zip(before, params(learner.target))), "the target moved"
        assert any(not torch.equal(a, b) for a, b in zip(online, params(learner.target))), "but not all the way"


def test_hard_target_update_copies_only_every_interval():
    rng = np.random.default_rng(0)
    learner = dqn(target_update_interval=3)  # target_tau 1.0 by default
    start = params(learner.target)
    for step in (1, 2):
        learner.update(random_batch(32, rng))
        assert all(torch.equal(a, b) for a, b in zip(start, params(learner.target))), step
        assert any(not torch.equal(a, b) for a, b in zip(params(learner.q), params(learner.target)))
    learner.update(random_batch(32, rng))
    assert all(torch.equal(a, b) for a, b in zip(params(learner.q), params(learner.target)))


@pytest.mark.parametrize("options, key", [({"n_step": 0}, "n_step"), ({"target_tau": 0.0}, "target_tau"),
                                          ({"target_tau": 1.5}, "target_tau"), ({"torso": "resnet"}, "torso"),
                                          ({"dueling": "yes"}, "dueling"),
                                          ({"clipped_double": 1}, "clipped_double"),
                                          ({"layer_norm": "yes"}, "layer_norm")])
def test_bad_extension_options_are_refused_naming_them(options, key):
    with pytest.raises(ConfigError, match=key):
        dqn(**options)
    config = {**DQNLearner.defaults, **options}  # what validate_config would hand over, unchecked
    with pytest.raises(ConfigError, match=key):
        DQNLearner.build_policy(VEC, config)


# ------------------------------------------------------------------------------- torso
def test_auto_torso_follows_the_rule_and_cnn_or_mlp_override_it(monkeypatch):
    board = spaces.Box(0, 1, (6, 7, 2), np.int8)
    image = spaces.Box(0, 255, (40, 40, 3), np.uint8)
    wide = spaces.Box(0, 1, (6, 7, 32), np.float32)     # too many channels for a board
    thin = spaces.Box(0, 1, (2, 7, 2), np.float32)      # a side below MIN_BOARD_SIDE
    flat = spaces.Box(0, 1, (5,), np.float32)
    monkeypatch.setattr(networks, "AUTO_CNN_FOR_BOARDS", False)
    assert [auto_torso(s) for s in (board, image, wide, thin, flat)] == ["flat", "image", "flat", "flat", "flat"]
    monkeypatch.setattr(networks, "AUTO_CNN_FOR_BOARDS", True)
    assert [auto_torso(s) for s in (board, image, wide, thin, flat)] == ["board", "image", "flat", "flat", "flat"]
    assert isinstance(Encoder(BOARD).leaves[0], BoardEncoder)
    monkeypatch.setattr(networks, "AUTO_CNN_FOR_BOARDS", False)
    assert isinstance(Encoder(BOARD).leaves[0], FlatEncoder), "auto keeps today's choice for boards"
    assert isinstance(Encoder(BOARD, "cnn").leaves[0], BoardEncoder)
    assert isinstance(Encoder(BOARD, "mlp").leaves[0], FlatEncoder)
    img = agent_layout("a", image, spaces.Discrete(2))
    assert isinstance(Encoder(img).leaves[0], ImageEncoder) and isinstance(Encoder(img, "cnn").leaves[0], ImageEncoder)
    assert isinstance(Encoder(img, "mlp").leaves[0], FlatEncoder)
    with pytest.raises(ConfigError, match=r"agent 'agent_0': torso='cnn' needs a 3-dim Box"):
        Encoder(VEC, "cnn")


@pytest.mark.parametrize("shape", [(6, 7, 2), (3, 3, 2), (5, 9, 3)], ids=["connect_four", "tictactoe", "5x9x3"])
def test_the_board_encoder_computes_exactly_its_convolution(shape):
    """The encoder gathers patches and multiplies (cheaper than conv2d on small boards); the result must be
    the Conv2d's own, in its (filter, row, column) order, followed by the raw cells: forward and gradients."""
    torch.manual_seed(0)
    encoder = BoardEncoder(spaces.Box(0, 1, shape, np.float32))
    x = torch.rand(5, *shape)
    conv = encoder.conv  # the Conv2d -> ReLU -> Flatten it holds its parameters in
    expected = torch.cat([conv(x.permute(0, 3, 1, 2)), x.reshape(5, -1)], dim=1)
    got = encoder(x)
    assert got.shape == (5, encoder.out_dim) and torch.allclose(got, expected, atol=1e-5)
    weight = conv[0].weight
    grad_got = torch.autograd.grad((got * torch.arange(got.shape[1])).sum(), weight)[0]
    grad_expected = torch.autograd.grad((expected * torch.arange(got.shape[1])).sum(), weight)[0]
    assert torch.allclose(grad_got, grad_expected, rtol=1e-4, atol=1e-3)


def test_board_cnn_keeps_every_cell_and_its_policy_vector_round_trips():
    enc = BoardEncoder(BOARD.obs_space)
    assert enc.out_dim == networks.BOARD_CHANNELS * 3 * 4 + 6 * 7 * 2  # 4x4 kernel placements, then raw cells
    obs = np.random.default_rng(0).integers(0, 2, (5, 6, 7, 2)).astype(np.int8)
    mask = np.ones((5, 7), bool)
    mask[:, 3] = False
    for cls in (DQNLearner, PPOLearner):
        config = cls.validate_config("player_0", {"torso": "cnn"})
        a, b = cls.build_policy(BOARD, config), cls.build_policy(BOARD, config)
        assert isinstance(a.encoder.leaves[0], BoardEncoder)
        x = {"obs": torch.as_tensor(obs)}
        first = a(x) if cls is DQNLearner else a.evaluate(x, None)[1]
        second = b(x) if cls is DQNLearner else b.evaluate(x, None)[1]
        assert not torch.equal(first, second)
        vector_to_policy(policy_to_vector(a), b)
        again = b(x) if cls is DQNLearner else b.evaluate(x, None)[1]
        assert torch.equal(first, again), cls.__name__
        a.seed(0)
        actions, _ = a.act({"obs": obs}, mask, True)
        assert (actions != 3).all() and actions.shape == (5,)
    learner = dqn(BOARD, torso="cnn")
    rng = np.random.default_rng(1)
    batch = {"obs": obs, "next_obs": obs, "action": rng.integers(0, 7, 5), "reward": np.ones(5, np.float32),
             "terminated": np.zeros(5, bool), "truncated": np.zeros(5, bool), "action_mask": mask,
             "next_action_mask": mask, "policy_version": np.zeros(5, np.int64)}
    before = policy_to_vector(learner.q)
    assert np.isfinite(learner.update(batch)["loss"]) and not np.array_equal(before, policy_to_vector(learner.q))


def test_mirror_flips_half_the_rows_boards_actions_and_masks_together():
    n = 400
    obs = np.zeros((n, 6, 7, 2), np.int8)
    obs[:, 5, 0, 0] = 1  # a piece in the bottom-left corner
    mask = np.zeros((n, 7), np.int8)
    mask[:, :2] = 1  # columns 0 and 1 legal
    original = obs.copy()
    batch = {"obs": obs, "next_obs": obs.copy(), "action": np.full(n, 1, np.int64), "action_mask": mask,
             "next_action_mask": mask.copy(), "reward": np.arange(n, dtype=np.float32)}
    out = mirror_batch(batch, np.random.default_rng(0))
    flipped = out["action"] == 5
    assert 150 < flipped.sum() < 250  # about half, drawn per row
    assert set(out["action"][~flipped]) == {1}
    for key in ("obs", "next_obs"):
        assert (out[key][flipped, 5, 6, 0] == 1).all() and (out[key][flipped, 5, 0, 0] == 0).all()
        assert (out[key][~flipped] == obs[~flipped]).all()
    for key in ("action_mask", "next_action_mask"):
        assert (out[key][flipped] == mask[0, ::-1]).all() and (out[key][~flipped] == mask[0]).all()
    assert (out["reward"] == batch["reward"]).all()
    assert (batch["obs"] == original).all() and (batch["action"] == 1).all()  # the sampled batch is not changed


def test_connect_four_played_mirrored_is_the_mirror_image_of_the_game():
    """What makes mirror=True sound on connect_four_v3: playing column 6 - c wherever one game plays c gives
    mirrored observations and masks, and the same rewards, turn by turn."""
    from pettingzoo.classic import connect_four_v3

    rng = np.random.default_rng(1)
    plain, mirrored = connect_four_v3.env(), connect_four_v3.env()
    turns = 0
    for episode in range(20):
        plain.reset(seed=episode)
        mirrored.reset(seed=episode)
        for agent, other in zip(plain.agent_iter(), mirrored.agent_iter()):
            assert agent == other
            obs, reward, terminated, truncated, _ = plain.last()
            m_obs, m_reward, m_terminated, m_truncated, _ = mirrored.last()
            one = {"obs": obs["observation"][None], "next_obs": obs["observation"][None], "action": np.zeros(1),
                   "action_mask": obs["action_mask"][None]}
            image = mirror_batch(one, _always_mirror())
            assert (image["obs"][0] == m_obs["observation"]).all()
            assert (image["action_mask"][0] == m_obs["action_mask"]).all()
            assert (reward, terminated, truncated) == (m_reward, m_terminated, m_truncated)
            if terminated or truncated:
                plain.step(None)
                mirrored.step(None)
                continue
            column = int(rng.choice(np.flatnonzero(obs["action_mask"])))
            plain.step(column)
            mirrored.step(6 - column)
            turns += 1
    assert turns > 200


def _always_mirror():
    class Heads:
        def random(self, n):
            return np.zeros(n)  # every row < 0.5: mirrored
    return Heads()


def test_mirror_is_refused_where_actions_are_not_the_board_columns():
    ttt = agent_layout("player_1", spaces.Box(0, 1, (3, 3, 2), np.int8), spaces.Discrete(9), info_mask=True)
    with pytest.raises(ConfigError, match=r"'player_1'.*mirror=True.*Discrete\(9\)"):
        dqn(ttt, mirror=True)
    with pytest.raises(ConfigError, match="mirror"):
        dqn(BOARD, mirror="yes")
    learner = dqn(BOARD, mirror=True, batch_size=8)
    assert learner.config["mirror"] is True


def test_prioritized_replay_draws_rows_by_priority_and_weights_them_back():
    """Rows are drawn in proportion to their priority, and each row's loss weight is (N P)^-beta over the
    batch's largest; new rows enter with the top priority; a row the actor overwrote takes its new row's."""
    from pzasync.learners.prioritized import ALPHA, BETA, EPSILON, PrioritizedReplay

    buf = SharedRingBuffer.create(VEC, 8)
    try:
        for i in range(8):
            write(buf, i, i + 1, 0.0)
        replay = PrioritizedReplay(buf)
        rng = np.random.default_rng(0)
        first = replay.sample(4, rng)
        assert (replay.priority == 1.0).all() and (first["weight"] == 1.0).all()  # all new: uniform
        errors = np.array([0.0, 1.0, 3.0, 0.0, 0.0, 0.0, 0.0, 7.0])
        replay.update(np.arange(8), errors)
        expected = (errors + EPSILON) ** ALPHA
        np.testing.assert_allclose(replay.priority, expected)
        counts = np.zeros(8)
        for _ in range(400):
            batch = replay.sample(50, rng)
            np.add.at(counts, batch["logical"], 1)
            assert np.array_equal(batch["obs"][:, 0].astype(int), batch["logical"])  # row i holds obs i
            probability = expected[batch["logical"]] / expected.sum()
            weight = (8 * probability) ** -BETA
            np.testing.assert_allclose(batch["weight"], weight / weight.max(), rtol=1e-5)
        np.testing.assert_allclose(counts / counts.sum(), expected / expected.sum(), atol=0.01)
        top = replay.top
        assert top == pytest.approx((7.0 + EPSILON) ** ALPHA)
        write(buf, 100, 101, 0.0)  # logical 8 overwrites row 0 (priority ~0: never drawn until now)
        batch = replay.sample(2000, rng)
        assert replay.priority[0] == top and 8 in batch["logical"] and 0 not in batch["logical"]
        assert (batch["obs"][batch["logical"] == 8, 0] == 100).all()
        replay.update(np.array([0, 8]), np.array([5.0, 2.0]))  # logical 0 is gone: untouched
        assert replay.priority[0] == pytest.approx((2.0 + EPSILON) ** ALPHA)
    finally:
        buf.close()
        buf.unlink()


def test_gather_logical_marks_rows_a_later_lap_overwrote():
    buf = SharedRingBuffer.create(VEC, 4)
    try:
        for i in range(6):
            write(buf, i, i + 1, 0.0)
        batch, valid = buf.gather_logical(np.array([0, 1, 2, 5, 6]))
        assert valid.tolist() == [False, False, True, True, False]  # 0, 1 overwritten by 4, 5; 6 not written
        assert batch["obs"][2:4, 0].tolist() == [2, 5]
    finally:
        buf.close()
        buf.unlink()


def test_a_prioritized_dqn_update_sets_the_replayed_rows_priorities_from_their_errors():
    from pzasync.learners.prioritized import ALPHA, EPSILON

    buf = SharedRingBuffer.create(VEC, 64)
    try:
        rng = np.random.default_rng(1)
        for i in range(40):
            write(buf, i, i + 1, rng.normal(), terminated=i % 5 == 4)
        learner = dqn(prioritized=True, batch_size=16, gamma=0.9)
        batch = learner.sample(buf, np.random.default_rng(0))
        assert {"weight", "logical"} <= set(batch) and len(batch["logical"]) == 16
        with torch.no_grad():
            target = learner.compute_targets(batch)
            index = torch.as_tensor(batch["action"]).reshape(-1, 1)
            q = learner.q({"obs": torch.as_tensor(batch["obs"])}).gather(1, index).squeeze(1)
        learner.update(batch)
        rows = batch["logical"] % 64
        np.testing.assert_allclose(learner.replay.priority[rows], (np.abs((target - q).numpy()) + EPSILON) ** ALPHA,
                                   rtol=1e-5)
        untouched = np.setdiff1d(np.arange(40), batch["logical"])
        assert (learner.replay.priority[untouched] == 1.0).all()
    finally:
        buf.close()
        buf.unlink()


def test_prioritized_replay_is_refused_where_it_cannot_work():
    with pytest.raises(ConfigError, match=r"prioritized.*one-step targets only"):
        dqn(prioritized=True, n_step=3)
    from pzasync.transport.shards import ShardedBuffer

    shards = [SharedRingBuffer.create(VEC, 8) for _ in range(2)]
    try:
        for shard in shards:
            write(shard, 1, 2, 0.0)
        with pytest.raises(ConfigError, match=r"prioritized=True needs the learner to read one buffer"):
            dqn(prioritized=True).sample(ShardedBuffer(shards), np.random.default_rng(0))
    finally:
        for shard in shards:
            shard.close()
            shard.unlink()
