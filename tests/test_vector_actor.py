"""The vectorised actor (RunConfig.envs_per_actor): N env copies stepped side by side with batched forwards.

Its transitions must be exactly those of N independent single-env rollouts seeded seed + k, copy by copy and
agent by agent, with each copy's rewards conserved; the learners must be able to tell the copies apart.
"""

from __future__ import annotations

import hashlib
import os
from collections import Counter, defaultdict

import numpy as np
import pytest
import torch
from faulty_envs import crash_in_seeded_copy, hanging_connect_four, leaky_connect_four

from pzasync import AsyncRunner, RunConfig, SequentialRunner, rollout
from pzasync.core.collect import transitions_to_arrays
from pzasync.core.environments import EnvSpec
from pzasync.core.spaces import env_layouts, probe_info_masks
from pzasync.core.transitions import Transition
from pzasync.errors import EnvCrashedError, RewardConservationError
from pzasync.learners import LearnerContext, Policy
from pzasync.learners.ppo import PPOLearner
from pzasync.runtime.actor import ActingAgent, Actor, ActorContext, LocalPolicy
from pzasync.runtime.copies import LocalEnvs
from pzasync.runtime.copies.workers import EnvWorkers

pytestmark = pytest.mark.timeout(240)

FIELDS = ("obs", "action", "reward", "next_obs", "terminated", "truncated", "action_mask", "next_action_mask")


def hashed_choice(obs, mask, n: int) -> int:
    """A deterministic action from the observation's bytes: the same in a rollout and in a batch."""
    legal = np.flatnonzero(mask) if mask is not None and mask.any() else np.arange(n)
    leaves = obs.values() if isinstance(obs, dict) else [obs]
    digest = hashlib.blake2b(b"".join(np.ascontiguousarray(v).tobytes() for v in leaves), digest_size=4).digest()
    return int(legal[int.from_bytes(digest, "little") % len(legal)])


class HashedPolicy(Policy):
    """`hashed_choice` for every row of a batch, counting the forwards and their sizes."""

    def __init__(self, layout):
        super().__init__()
        self.layout, self.n = layout, layout.action_space.n
        self.batch_sizes: list[int] = []

    def act(self, obs, mask, explore):
        rows = len(next(iter(obs.values())))
        self.batch_sizes.append(rows)
        actions = []
        for i in range(rows):
            one = obs["obs"][i] if "obs" in obs else {k[4:]: v[i] for k, v in obs.items()}
            actions.append(hashed_choice(one, None if mask is None else mask[i], self.n))
        return np.array(actions, np.int64), {}


class RandomLegal:
    """A uniformly random legal action per row, counted into the wrapped policy's `batch_sizes`."""

    def __init__(self, policy, seed: int = 0):
        self.policy, self.rng = policy, np.random.default_rng(seed)

    def __call__(self, obs, mask, explore):
        self.policy.batch_sizes.append(len(mask))
        return np.array([self.rng.choice(np.flatnonzero(m)) for m in mask], np.int64), {}


class ListWriter:
    """A TransitionWriter that keeps what it is given (rows in columns, on the parallel path, as transitions of
    `agent`)."""

    def __init__(self, agent: str | None = None):
        self.agent = agent
        self.rows: list[Transition] = []

    def write(self, t: Transition) -> None:
        self.rows.append(t)

    def write_batch(self, transitions) -> int:
        self.rows.extend(transitions)
        return len(transitions)

    def write_rows(self, batch, follows=None) -> int:
        core = ("obs", "action", "reward", "next_obs", "terminated", "truncated")
        for i in range(len(batch["reward"])):
            self.rows.append(Transition(self.agent, batch["obs"][i], batch["action"][i], float(batch["reward"][i]),
                                        batch["next_obs"][i], bool(batch["terminated"][i]),
                                        bool(batch["truncated"][i]),
                                        extras={k: v[i] for k, v in batch.items() if k not in core}))
        return len(batch["reward"])


class Counters:
    """The RunControl words the actor touches, in plain Python."""

    stop_requested = False

    def __init__(self):
        self.steps, self.episodes = {}, 0

    def record_steps(self, agent, agent_steps, total_steps):
        if agent is not None:
            self.steps[agent] = agent_steps

    def record_episodes(self, episodes):
        self.episodes = episodes

    def get(self, agent, word):
        return 0


def vector_actor(env_id, copies: int, workers: int = 0, timeout_s: float = 60.0, **kwargs):
    spec = EnvSpec.of(env_id)
    probe = spec.make()
    layouts = env_layouts(probe, probe_info_masks(probe, seed=0))
    probe.close()
    writers = {agent: ListWriter(agent) for agent in layouts}
    agents = {agent: ActingAgent(agent, layout, LocalPolicy(HashedPolicy(layout)), learns=False, buffer=writers[agent],
                                 tracks=copies)
              for agent, layout in layouts.items()}
    envs = EnvWorkers(spec, copies, workers, timeout_s) if workers else LocalEnvs([spec.make() for _ in range(copies)])
    actor = Actor(ActorContext(envs, agents, Counters(), **kwargs))
    return actor, writers


def per_copy(writer: ListWriter, copies: int) -> dict[int, list[Transition]]:
    out = defaultdict(list)
    for t in writer.rows:
        out[t.extras["track"] if copies > 1 else 0].append(t)
    return out


@pytest.mark.parametrize("env_id, copies, workers, max_steps", [
    ("pettingzoo.classic.connect_four_v3", 5, 0, None),  # masks, rewards on the other player's turn
    ("pzasync.envs.forage", 4, 0, None),                 # agents that die mid-episode, rewards on others' turns
    ("mpe2.simple_spread_v3", 3, 0, 7),                  # parallel env through PettingZoo's conversion, cut
    ("pzasync.envs.forage", 5, 2, None),                 # the same, stepped by 2 env workers
    ("pettingzoo.classic.connect_four_v3", 4, 1, None),  # masks, over one worker's pipe
    pytest.param("mpe2.simple_spread_v3", 3, 3, 7, marks=pytest.mark.slow),
])
def test_each_copy_equals_an_independent_rollout_with_seed_plus_k(env_id, copies, workers, max_steps):
    """Every decision yields exactly one transition (completed at the agent's next turn or by a cut), so copy k
    took as many decisions as it has transitions; a single-env rollout seeded seed + k and given that many
    decisions must produce the same transitions, field for field, for every agent."""
    seed = 11
    actor, writers = vector_actor(env_id, copies, workers, max_episode_steps=max_steps)
    summaries = []
    taken = actor.run(agent_steps=1500, seed=seed, keep_going=lambda: True, on_episode=summaries.append)
    assert taken == 1500
    streams = {agent: per_copy(w, copies) for agent, w in writers.items()}
    decisions = Counter()
    for by_copy in streams.values():
        for k, rows in by_copy.items():
            decisions[k] += len(rows)
    assert sum(decisions.values()) == 1500 and set(decisions) == set(range(copies)), decisions
    layouts = {a: x.layout for a, x in actor.agents.items()}
    for k in range(copies):
        spec = EnvSpec.of(env_id)
        n = {a: layouts[a].action_space.n for a in layouts}
        expected = rollout(spec.make(), lambda agent, obs, mask, n=n: hashed_choice(obs, mask, n[agent]),
                           agent_steps=decisions[k], seed=seed + k, max_episode_steps=max_steps)
        got = transitions_to_arrays([t for by_copy in streams.values() for t in by_copy[k]], layouts)
        assert set(got) == set(expected), (k, sorted(got), sorted(expected))
        for agent, arrays in expected.items():
            for name in FIELDS:
                if name in arrays:
                    np.testing.assert_array_equal(got[agent][name], arrays[name], err_msg=f"copy {k} {agent} {name}")
    # every copy's episodes were summarised under its own index, and batches really held several copies
    # (env workers answer a group of copies at a time: two groups per worker)
    assert {s.copy for s in summaries} == set(range(copies))
    per_group = copies / (min(copies, 2 * workers) if workers else 1)
    assert max(max(a.policy.batch_sizes) for a in actor.agents.values()) == 1 or per_group > 1
    if per_group >= 2:
        assert max(max(a.policy.batch_sizes) for a in actor.agents.values()) > 1


def test_copies_drift_out_of_phase_and_are_brought_back_without_waiting_more_than_a_round():
    """connect_four's episodes end on either seat, so 16 copies split between the two players' policies and a
    round would need two half-size forwards. The actor answers the larger group and holds the other back one
    round, after which both groups face the same seat: the forwards stay nearly full, and no copy waits twice."""
    def mean_batch(actor) -> float:
        sizes = [n for a in actor.agents.values() for n in a.policy.batch_sizes]
        return sum(sizes) / len(sizes)

    def random_players(actor):  # hashed choices would play 16 identical games, never out of phase
        for a in actor.agents.values():
            a.policy.act = RandomLegal(a.policy)
        return actor

    actor = random_players(vector_actor("pettingzoo.classic.connect_four_v3", 16)[0])
    rounds = []
    align = actor.align
    actor.align = lambda pending: rounds.append(align(pending)) or rounds[-1]
    actor.run(agent_steps=4000, seed=5, keep_going=lambda: True, on_episode=lambda s: None)
    assert mean_batch(actor) >= 14, mean_batch(actor)
    held_rounds = 0
    for (_, held), (now, _) in zip(rounds, rounds[1:]):
        held_rounds += bool(held)
        assert {d.copy for d in held} <= {d.copy for d in now}  # answered the very next round
    assert held_rounds >= 20  # episodes did end out of phase

    unaligned = random_players(vector_actor("pettingzoo.classic.connect_four_v3", 16)[0])
    unaligned.align = lambda pending: (pending, [])
    unaligned.run(agent_steps=4000, seed=5, keep_going=lambda: True, on_episode=lambda s: None)
    assert mean_batch(unaligned) < 11  # what the alignment is worth


def test_rewards_are_conserved_per_copy():
    """connect_four is zero-sum with every reward inside transitions: per copy, the transitions' rewards add up
    to that copy's summed episode returns (rewards from one copy never reach another copy's transitions)."""
    actor, writers = vector_actor("pettingzoo.classic.connect_four_v3", 6)
    summaries = []
    actor.run(agent_steps=3000, seed=3, keep_going=lambda: True, on_episode=summaries.append)
    paid = defaultdict(float)
    for s in summaries:
        paid[s.copy] += sum(s.returns.values())
        assert abs(sum(s.returns.values())) < 1e-9 or s.cut_by_actor
    for k in range(6):
        in_transitions = sum(t.reward for w in writers.values() for t in per_copy(w, 6)[k])
        assert in_transitions == pytest.approx(paid[k])
    assert sum(1 for s in summaries if not s.cut_by_actor) > 6 * 5  # many finished games per copy


def test_a_copy_that_loses_a_reward_is_named():
    layouts_actor, _ = vector_actor("pettingzoo.classic.connect_four_v3", 3)
    actor = Actor(ActorContext(LocalEnvs([leaky_connect_four(k == 2) for k in range(3)]), layouts_actor.agents,
                               Counters()))
    with pytest.raises(RewardConservationError, match="env copy 2"):
        actor.run(agent_steps=400, seed=0, keep_going=lambda: True, on_episode=lambda s: None)


def test_an_env_copy_that_raises_is_named():
    """In the actor's process: copy 1 (first reset with seed 0 + 1) raises."""
    actor, _ = vector_actor(lambda: crash_in_seeded_copy(1), 3)
    with pytest.raises(EnvCrashedError, match=r"env copy 1\).*KeyError: 'boom in a worker'"):
        actor.run(agent_steps=400, seed=0, keep_going=lambda: True, on_episode=lambda s: None)


def test_an_env_worker_exception_comes_back_as_its_type_naming_the_copy():
    actor, _ = vector_actor(crash_in_seeded_copy, 4, workers=2)
    with pytest.raises(KeyError) as info:
        actor.run(agent_steps=400, seed=0, keep_going=lambda: True, on_episode=lambda s: None)
    error = info.value
    assert isinstance(error, EnvCrashedError)
    assert "env copy 3, in env worker 1 (copies 2-3)" in str(error) and "boom in a worker" in str(error)
    assert "agent 'player_1'" in str(error)
    assert 'raise KeyError("boom in a worker")' in str(error.__cause__)  # the worker's own traceback


@pytest.mark.timeout(60)
def test_a_hung_env_worker_is_reported_and_stopped():
    actor, _ = vector_actor(hanging_connect_four, 2, workers=1, timeout_s=2.0)
    with pytest.raises(EnvCrashedError, match=r"env worker 0 \(copies 0-1\).*has not answered for 2s"):
        actor.run(agent_steps=100, seed=0, keep_going=lambda: True, on_episode=lambda s: None)


def test_gae_keeps_interleaved_tracks_apart():
    """Two copies' rows interleaved in one chunk, tagged by `track`: PPO's advantages equal those computed on
    each copy's rows alone."""
    from gymnasium import spaces

    from pzasync.core.spaces import agent_layout

    layout = agent_layout("a", spaces.Box(-1, 1, (3,), np.float32), spaces.Discrete(2), False)
    options = PPOLearner.validate_config("a", {"batch_size": 8})
    rng = np.random.default_rng(0)

    def chunk(n):
        return {"obs": rng.standard_normal((n, 3)).astype(np.float32),
                "next_obs": rng.standard_normal((n, 3)).astype(np.float32),
                "reward": rng.standard_normal(n).astype(np.float32),
                "terminated": rng.random(n) < 0.2, "truncated": np.zeros(n, bool)}

    learner = PPOLearner(LearnerContext("a", layout, options, "cpu", 0, tracks=2))
    a, b = chunk(6), chunk(6)
    mixed = {k: np.empty((12, *v.shape[1:]), v.dtype) for k, v in a.items()}
    for k in a:
        mixed[k][0::2], mixed[k][1::2] = a[k], b[k]
    mixed["track"] = np.tile(np.array([0, 1], np.int32), 6)
    adv_mixed, _ = learner.compute_advantages(mixed)
    adv_a, _ = learner.compute_advantages(a)
    adv_b, _ = learner.compute_advantages(b)
    torch.testing.assert_close(adv_mixed[0::2], adv_a)
    torch.testing.assert_close(adv_mixed[1::2], adv_b)


@pytest.mark.parametrize("runner, learner", [(SequentialRunner, "dqn"),
                                             pytest.param(AsyncRunner, "ppo", marks=pytest.mark.slow)])
def test_runners_act_on_several_copies(runner, learner):
    """Every decision ends in the buffer exactly once, under its copy's track; the learner updates."""
    config = RunConfig(envs_per_actor=4, seed=5, buffer_capacity=5000)
    options = {"learning_starts": 100} if learner == "dqn" else {"batch_size": 64}
    result = runner("pettingzoo.classic.tictactoe_v3", (learner, options), config).run(agent_steps=1200)
    assert result.agent_steps == 1200
    for agent, r in result.agents.items():
        assert r.transitions_written == r.agent_steps > 0, agent
        assert r.updates > 0, agent
    assert result.episodes >= 1200 // 9


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the refusal cannot be shown here")
def test_a_cuda_actor_device_without_cuda_is_refused_before_anything_starts():
    from pzasync.errors import ConfigError

    with pytest.raises(ConfigError, match=r"actor_device='cuda' requested, but CUDA is not available"):
        SequentialRunner("pettingzoo.classic.tictactoe_v3", "dqn", RunConfig(actor_device="cuda"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (RunConfig.actor_device='cuda')")
def test_the_actor_runs_its_batched_forwards_on_cuda():
    """Policy copies on the GPU act like the same weights on the CPU (greedy), and the run trains."""
    from pzasync.runtime.plan import RunPlan

    plan = RunPlan("pettingzoo.classic.connect_four_v3", ("dqn", {"torso": "mlp"}), RunConfig())
    layout = plan.agents["player_0"].layout
    cpu = plan.agents["player_0"].build_policy(0)
    gpu = plan.agents["player_0"].build_policy(0).to("cuda")
    gpu.load_state_dict(cpu.state_dict())
    obs = {"obs": np.random.default_rng(0).integers(0, 2, (32, 6, 7, 2)).astype(np.int8)}
    mask = np.ones((32, 7), bool)
    np.testing.assert_array_equal(cpu.act(obs, mask, False)[0], gpu.act(obs, mask, False)[0])
    assert layout.has_mask
    config = RunConfig(envs_per_actor=8, actor_device="cuda", seed=1)
    result = SequentialRunner("pettingzoo.classic.connect_four_v3", ("dqn", {"learning_starts": 100}),
                              config).run(agent_steps=1500)
    assert result.agent_steps == 1500 and all(r.updates > 0 for r in result.agents.values())


def test_prepared_env_workers_serve_the_next_run_and_are_stopped_if_no_run_comes():
    """`Actor.prepare` spawns the env workers before the clock starts; `run` must use those (not spawn more),
    and `close` must stop workers that no run used."""
    actor, writers = vector_actor("pettingzoo.classic.connect_four_v3", 4, workers=1)
    spawned = []
    make_copies = actor._copies
    actor._copies = lambda *args: spawned.append(make_copies(*args)) or spawned[-1]
    summaries = []
    actor.prepare(seed=0, on_episode=summaries.append)
    workers = list(spawned[0].procs)
    assert len(spawned) == 1 and all(p.is_alive() for p in workers)
    actor.run(agent_steps=300, seed=0, keep_going=lambda: True, on_episode=summaries.append)
    assert len(spawned) == 1, "run spawned its own workers instead of using the prepared ones"
    assert sum(len(w.rows) for w in writers.values()) > 250 and summaries
    for p in workers:
        p.join(10)
        assert not p.is_alive()

    actor.prepare(seed=1, on_episode=summaries.append)
    unused = list(spawned[1].procs)
    assert all(p.is_alive() for p in unused)
    actor.close()
    for p in unused:
        p.join(10)
        assert not p.is_alive(), "a prepared worker outlived close()"


def test_the_worker_wire_rebuilds_arrays_and_numpy_scalars_exactly():
    import pickle

    from pzasync.runtime.copies.wire import wire_dumps

    values = [np.arange(12, dtype=np.int16).reshape(3, 4).T, np.zeros((0, 3), np.float32), np.array(2.5),
              np.float32(1.5), np.int64(3), np.bool_(True), np.zeros(2, dtype=[("a", "<i4"), ("b", "<f8")]),
              np.array([1, "x"], dtype=object), np.ma.array([1, 2], mask=[True, False])]
    for value in values:
        back = pickle.loads(wire_dumps({"v": value, "n": [value]}))
        assert back["v"] is back["n"][0], "one object stays one object"
        back = back["v"]
        assert type(back) is type(value) and back.dtype == value.dtype and np.shape(back) == np.shape(value)
        assert np.array_equal(np.asarray(back), np.asarray(value))
        if isinstance(value, np.ndarray):
            assert back.flags.writeable, "an array off the wire must be as writable as the one sent"
    masked = pickle.loads(wire_dumps(values[-1]))
    assert masked.mask.tolist() == [True, False]


def test_a_transition_crosses_the_worker_pipe_as_references_to_the_decisions_the_actor_answered():
    """The worker names the answered decisions a transition starts and ends at; the actor rebuilds it from its
    own copies of them. Anything the worker did not get from those decisions (a final observation, a copied
    array, a copy that started a new episode) travels in full."""
    import pickle

    from pzasync.core.stepper import PendingDecision
    from pzasync.runtime.copies.wire import FINAL, AnsweredDecisions, wire_dumps

    rng = np.random.default_rng(0)
    worker, actor = AnsweredDecisions(), AnsweredDecisions()

    def answer(copy, agent):
        d = PendingDecision(copy, agent, rng.integers(0, 2, (6, 7, 2)).astype(np.int8), np.ones(7, np.int8))
        action, extras = np.int64(rng.integers(7)), {"policy_version": 3}
        worker.answered(d, action, extras)
        mine = pickle.loads(wire_dumps((d, action, extras)))  # the actor's copies, as they crossed the pipe
        actor.answered(*mine)
        return d, action, extras, mine

    def crossed(t, copy):
        event = pickle.loads(wire_dumps(worker.encode(t, copy)))
        return event, (actor.decode(event) if event[0] == "r" else Transition(*event[2]))

    d0, a0, x0, mine0 = answer(2, "player_0")
    d1, a1, x1, mine1 = answer(2, "player_0")
    t = Transition("player_0", d0.obs, a0, -1.0, d1.obs, False, False, d0.mask, d1.mask, x0)
    event, back = crossed(t, 2)
    assert event[0] == "r" and event[3:5] == (-2, -1) and len(wire_dumps(event)) < 150
    assert back.obs is mine0[0].obs and back.next_obs is mine1[0].obs and back.action is mine0[1]
    assert back.extras is mine0[2] and (back.reward, back.terminated, back.truncated) == (-1.0, False, False)
    assert_same_transition(back, t)

    final = rng.integers(0, 2, (6, 7, 2)).astype(np.int8)  # a terminal observation the actor never saw
    t = Transition("player_0", d1.obs, a1, 1.0, final, True, False, d1.mask, None, x1)
    event, back = crossed(t, 2)
    assert event[0] == "r" and event[3:5] == (-1, None) and back.obs is mine1[0].obs
    assert_same_transition(back, t)

    stashed = {}  # the final slot: the worker's stash takes the terminal observation, the actor's final reads it
    event = pickle.loads(wire_dumps(worker.encode(t, 2, lambda *put: stashed.setdefault("slot", put) is put)))
    assert event[0] == "r" and event[3:5] == (-1, FINAL) and event[9] is None and stashed["slot"][1:3] == (
        "player_0", final)
    back = actor.decode(event, lambda copy, agent: (stashed["slot"][2].copy(), None))
    assert back.obs is mine1[0].obs
    assert_same_transition(back, t)
    refused = pickle.loads(wire_dumps(worker.encode(t, 2, lambda *put: False)))
    assert refused[3:5] == (-1, None) and refused[9][0] is not None, "a refused stash sends it in full"

    copied = Transition("player_0", d0.obs.copy(), a0, 0.0, d1.obs.copy(), False, True, d0.mask, d1.mask, x0)
    event, back = crossed(copied, 2)
    assert event[0] == "t"
    assert_same_transition(back, copied)

    other = Transition("player_0", d0.obs, a0, 0.0, d1.obs, False, False, d0.mask, d1.mask, x0)
    assert crossed(other, 3)[0][0] == "t"  # another copy's history is its own
    worker.forget(2), actor.forget(2)
    assert crossed(other, 2)[0][0] == "t"


def assert_same_transition(got: Transition, want: Transition) -> None:
    for name in Transition.__dataclass_fields__:
        a, b = getattr(got, name), getattr(want, name)
        if isinstance(b, np.ndarray) or isinstance(a, np.ndarray):
            np.testing.assert_array_equal(a, b, err_msg=name)
            assert np.asarray(a).dtype == np.asarray(b).dtype, name
        else:
            assert a == b and type(a) is type(b), (name, a, b)


def test_observation_slots_carry_nested_observations_and_masks_and_refuse_what_does_not_fit():
    """What a worker puts in a slot comes out on the actor's side equal, in its storage dtypes, as a private
    copy; an observation that does not match its agent's layout is refused, so it goes through the pipe."""
    from gymnasium import spaces

    from pzasync.core.spaces import agent_layout
    from pzasync.transport.obs_slots import ObservationSlots
    from pzasync.transport.shm import list_segments, new_run_id

    nested = spaces.Dict({"image": spaces.Box(0, 255, (3, 4), np.uint8), "cell": spaces.Discrete(5),
                          "pair": spaces.Tuple((spaces.Box(-1, 1, (2,), np.float32), spaces.MultiBinary(3)))})
    layouts = {"a": agent_layout("a", nested, spaces.Discrete(4), info_mask=True),
               "b": agent_layout("b", spaces.Box(0, 1, (6,), np.float32), spaces.Discrete(2))}
    owner = ObservationSlots.create(new_run_id(), layouts, copies=3)
    worker = ObservationSlots.attach(owner.name, layouts, copies=3)
    try:
        rng = np.random.default_rng(0)
        obs = layouts["a"].copy_obs({"image": rng.integers(0, 255, (3, 4)), "cell": 3,
                                     "pair": (rng.random(2), np.array([1, 0, 1]))})
        mask = np.array([True, False, True, True])
        assert worker.put(worker.pending_slot(2), "a", obs, mask)
        flat = rng.random(6).astype(np.float32)
        assert worker.put(worker.final_slot(2, "b"), "b", flat, None)
        got, got_mask = owner.take(owner.pending_slot(2), "a")
        assert got_mask.dtype == bool and got_mask.tolist() == mask.tolist()
        for leaf in layouts["a"].obs_leaves:
            want, back = obs, got
            for key in leaf.path:
                want, back = want[key], back[key]
            assert back.dtype == leaf.dtype and back.shape == leaf.shape and np.array_equal(back, want), leaf.name
        got_flat, no_mask = owner.take(owner.final_slot(2, "b"), "b")
        assert no_mask is None and got_flat.dtype == np.float32 and np.array_equal(got_flat, flat)
        got_flat[:] = -5  # a private copy: the slot keeps what the worker wrote
        assert np.array_equal(owner.take(owner.final_slot(2, "b"), "b")[0], flat)
        assert worker.final_slot(2, "b") != worker.final_slot(1, "b") != worker.pending_slot(1)

        assert not worker.put(0, "b", np.zeros(7, np.float32), None), "another shape than the space's"
        assert not worker.put(0, "b", np.zeros(6, np.float64), None), "another dtype"
        assert not worker.put(0, "a", obs, None), "a mask the layout expects is missing"
        assert not worker.put(0, "b", flat, np.ones(2, bool)), "a mask the layout has no room for"
        assert not worker.put(0, "a", {"image": obs["image"]}, mask), "leaves missing"
        assert not worker.put(0, "c", flat, None), "an agent without a layout"
    finally:
        worker.close()
        owner.close()
        owner.unlink()
    assert owner.name not in {name for name, _run, _pid in list_segments()}


def test_env_workers_send_observations_through_shared_memory_not_the_pipe(monkeypatch):
    """With one worker on connect_four, no array crosses the pipe in the worker's answers: pending decisions
    name their copy's slot, transitions name answered decisions or a final slot. The slots' segment goes with
    the run."""
    import pzasync.runtime.copies.workers as ew
    from pzasync.runtime.copies.wire import FINAL
    from pzasync.transport.shm import list_segments

    answers = []

    def recording(conn):
        message = original(conn)
        answers.append(message)
        return message

    def arrays_in(value) -> int:
        if isinstance(value, (np.ndarray, np.generic)):
            return 1
        if isinstance(value, (tuple, list)):
            return sum(arrays_in(v) for v in value)
        if isinstance(value, dict):
            return sum(arrays_in(v) for v in value.values())
        return 0

    original = ew._recv_wire
    monkeypatch.setattr(ew, "_recv_wire", recording)
    actor, writers = vector_actor("pettingzoo.classic.connect_four_v3", 4, 1)
    actor.run(agent_steps=600, seed=3, keep_going=lambda: True, on_episode=lambda s: None)
    replies = [a for a in answers if a[0] == "ok"]
    pending = [d for a in replies for d in a[3]]
    events = [e for a in replies for e in a[2] if e[0] in ("r", "t")]
    assert len(pending) >= 600 and all(len(d) == 2 for d in pending), "each decision's obs came in its slot"
    assert sum(len(w.rows) for w in writers.values()) == len(events) and events
    assert all(e[0] == "r" for e in events)
    finals = [e for e in events if e[4] == FINAL]
    assert finals and all(e[6] or e[7] for e in finals) and any(e[6] for e in finals), \
        "episodes' last observations came through final slots"
    assert sum(arrays_in(a) for a in replies) == 0
    assert not [name for name, _run, pid in list_segments() if "envobs" in name and pid == os.getpid()]
