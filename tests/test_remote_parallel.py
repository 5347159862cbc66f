"""Remote envs on the parallel path (docs/remote.md, "The parallel API"): a server whose env is simultaneous-move
underneath offers its parallel API, a `RemoteParallelEnv` returns what the served parallel env returns, and the
actor's remote copies step a whole cycle of each copy per request, one frame per group of copies, each copy's
transitions exactly those of an in-process parallel rollout seeded seed + k; the plan's choice of path, a run, and
a server that fails mid-run."""

from __future__ import annotations

import json
import socket
import struct
from collections import Counter

import numpy as np
import pytest
from test_parallel import GENERATED, Comings, MaskedPair
from test_remote import C4, NODE_ID, PACED, needs_node, python_server, thread_server  # noqa: F401 - a fixture
from test_vector_actor import FIELDS, Counters, HashedPolicy, ListWriter, hashed_choice, per_copy

import pzasync
from pzasync.config import RunConfig
from pzasync.core.collect import transitions_to_arrays
from pzasync.core.environments import EnvSpec, choose_env_api, make_env, make_parallel_env
from pzasync.core.global_state import StateRequest
from pzasync.core.spaces import env_layouts, probe_info_masks
from pzasync.errors import ConfigError, EnvSpecError, RemoteEnvError
from pzasync.remote import Connection, connect, connect_parallel
from pzasync.remote.protocol import MAGIC, Kind, frame, read_frame
from pzasync.runtime.actor import ActingAgent, Actor, ActorContext, LocalPolicy
from pzasync.runtime.copies.remote import RemoteEnvs
from pzasync.runtime.plan import RunPlan

pytestmark = [pytest.mark.timeout(120), pytest.mark.usefixtures("no_remote_server_left")]

SPREAD = "mpe2.simple_spread_v3"
SPREAD_KWARGS = {"N": 3, "max_cycles": 9}


def env_args(kwargs: dict) -> str:
    """The test server's flags passing `kwargs` to the env."""
    return " ".join(f"--env-arg {key}={value}" for key, value in kwargs.items())


SPREAD_ARGS = env_args(SPREAD_KWARGS)


class InfoPair(MaskedPair):
    """MaskedPair whose infos also carry JSON values (numpy ones, made plain on the way)."""

    def _infos(self):
        infos = super()._infos()
        infos["agent_1"] = {"score": np.float32(self.t / 2), "grid": np.arange(2)}
        return infos


@pytest.fixture
def serving(thread_server):  # noqa: F811 - test_remote's fixture
    """`serving(env_fn) -> address`: an `EnvServer` on a thread of this process."""
    return thread_server


def assert_same_outputs(got: tuple, expected: tuple, what: str) -> None:
    """The dicts a parallel env's reset or step returned, field by field (the JSON parts of infos made plain)."""
    assert len(got) == len(expected), what
    for g, e in zip(got, expected):
        assert set(g) == set(e), what
        for agent, value in e.items():
            if isinstance(value, dict):
                assert set(g[agent]) == set(value), f"{what} {agent}"
                for key, leaf in value.items():
                    np.testing.assert_array_equal(g[agent][key], leaf, err_msg=f"{what} {agent} {key}")
            else:
                np.testing.assert_array_equal(g[agent], value, err_msg=f"{what} {agent}")
                assert np.asarray(g[agent]).dtype == np.asarray(value).dtype or isinstance(value, (bool, float)), what


# ---------------------------------------------------------------------------------------------- the protocol
def test_a_server_offers_the_parallel_api_only_where_the_env_has_one(serving):
    parallel = serving(Comings)
    turn_based = serving(lambda: make_env(C4))
    connection = Connection(parallel, 5)
    try:
        assert connection.parallel and connection.description["parallel"] is True
        assert set(connection.description["parallel_layout"]) == {"cycle_bytes", "parallel_step_bytes"}
    finally:
        connection.close()
    aec = connect(turn_based)
    try:
        assert not aec.connection.parallel and "parallel" not in aec.connection.description, \
            "a server without the parallel API says nothing of it: older clients see the same WELCOME"
    finally:
        aec.close()
    with pytest.raises(EnvSpecError, match=r"env 'unix://.*': its server .* does not offer the parallel API .*"
                                           r"use env_api='aec'"):
        connect_parallel(turn_based)


@pytest.mark.parametrize("factory", [Comings, InfoPair, lambda: make_parallel_env(SPREAD, N=3, max_cycles=6)],
                         ids=["generated-agents", "masks-and-json-infos", "simple_spread"])
def test_a_remote_parallel_env_returns_what_the_served_parallel_env_returns(serving, factory):
    """reset and step of `connect_parallel` return the served env's five dicts, field by field (agents that die
    and join, rewards to an agent before its first decision, masks and JSON in infos), and its live agents."""
    env, local = connect_parallel(serving(factory)), factory()
    rng = np.random.default_rng(0)
    try:
        assert env.possible_agents == local.possible_agents
        for episode in range(2):
            assert_same_outputs(env.reset(seed=episode), local.reset(seed=episode), "reset")
            steps = 0
            while local.agents:
                assert env.agents == local.agents
                actions = {a: int(rng.integers(local.action_space(a).n)) for a in local.agents}
                assert_same_outputs(env.step(actions), local.step(actions), f"episode {episode} step {steps}")
                steps += 1
            assert env.agents == [] and steps >= 4
    finally:
        env.close()


def test_parallel_requests_that_break_the_protocol_are_refused(serving):
    """A PARALLEL_STEP to a server that does not offer the API breaks the protocol (the connection closes); one
    that steps an instance reset through the other API is refused naming the instance."""
    turn_based, parallel = serving(lambda: make_env(C4)), serving(Comings)
    hello = frame(Kind.HELLO, MAGIC + struct.pack("<HH", 1, 0))

    def exchange(address: str, data: bytes) -> dict:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(5)
            sock.connect(address[len("unix://"):])
            sock.sendall(hello + data)
            kind, body = read_frame(sock, None, "test")
            assert kind == Kind.WELCOME
            while (reply := read_frame(sock, None, "test"))[0] != Kind.ERROR:
                pass
            return json.loads(bytes(reply[1]))

    refused = exchange(turn_based, frame(Kind.PARALLEL_STEP, struct.pack("<I", 0)))
    assert refused["code"] == "malformed" and "does not offer the parallel API" in refused["message"]
    reset = frame(Kind.RESET, struct.pack("<I", 1) + struct.pack("<IBq", 0, 0, 0))
    env = connect_parallel(parallel)
    layout = env.layout
    env.close()
    step = layout.parallel_step_struct.pack(0, *[0] * 4, *[b""] * 4)
    refused = exchange(parallel, reset + frame(Kind.PARALLEL_STEP, struct.pack("<I", 1) + step))
    assert refused["code"] == "instance" and "reset through the AEC protocol" in refused["message"], refused


# ---------------------------------------------------------------------------------------------- the actor
def remote_parallel_actor(env_id: str, copies: int, timeout_s: float = 30.0, state: StateRequest | None = None,
                          **kwargs):
    """The actor over remote copies on the parallel path, one module per observation shape (every agent of a team
    in one forward), writing into lists."""
    spec = EnvSpec.of(env_id, **kwargs).with_state(state)
    probe = spec.make()
    layouts = env_layouts(probe, probe_info_masks(probe, seed=0))
    probe.close()
    writers = {agent: ListWriter() for agent in layouts}
    shared: dict = {}
    for layout in layouts.values():
        shared.setdefault(str(layout.obs_space), LocalPolicy(HashedPolicy(layout)))
    agents = {agent: ActingAgent(agent, layout, shared[str(layout.obs_space)], learns=False, buffer=writers[agent],
                                 tracks=copies) for agent, layout in layouts.items()}
    actor = Actor(ActorContext(RemoteEnvs(spec, copies, timeout_s, parallel=True), agents, Counters()))
    return actor, writers, layouts, shared


def assert_copies_are_rollouts(spec: EnvSpec, writers: dict, layouts: dict, copies: int, seed: int,
                               cut_after: dict[int, int] | None = None) -> Counter:
    """Copy k's transitions equal a parallel rollout seeded seed + k of as many decisions, field by field."""
    streams = {agent: per_copy(w, copies) for agent, w in writers.items()}
    decisions: Counter = Counter()
    for by_copy in streams.values():
        for k, rows in by_copy.items():
            decisions[k] += len(rows)
    n = {a: layouts[a].action_space.n for a in layouts}
    for k in range(copies) if cut_after is None else cut_after:
        expected = pzasync.rollout(spec, lambda agent, obs, mask: hashed_choice(obs, mask, n[agent]),
                                   agent_steps=decisions[k], seed=seed + k, env_api="parallel")
        got = transitions_to_arrays([t for by_copy in streams.values() for t in by_copy[k]], layouts)
        assert set(got) == set(expected), f"copy {k}"
        for agent, arrays in expected.items():
            for name in FIELDS:
                value = arrays.get(name)
                for leaf, array in (value.items() if isinstance(value, dict) else [(None, value)]):
                    if array is not None:
                        mine = got[agent][name] if leaf is None else got[agent][name][leaf]
                        np.testing.assert_array_equal(mine, array, err_msg=f"copy {k} {agent} {name} {leaf}")
    return decisions


@pytest.mark.parametrize("env_id, kwargs, flags, copies, servers", [
    (SPREAD, SPREAD_KWARGS, "", 5, 1),
    pytest.param(GENERATED, {}, "", 4, 2, marks=pytest.mark.slow),                 # agents that die and join
    pytest.param("pettingzoo.sisl.pursuit_v5", {"max_cycles": 12, "n_pursuers": 4, "n_evaders": 10}, "", 3, 1,
                 marks=pytest.mark.slow),
    pytest.param("pettingzoo.butterfly.knights_archers_zombies_v11", {"max_cycles": 30}, "", 3, 1,
                 marks=pytest.mark.slow),                                          # agents die
    (SPREAD, SPREAD_KWARGS, PACED, 4, 1),                                          # replies at the server's pace
], ids=["simple_spread", "generated-agents", "sisl-pursuit", "butterfly-kaz", "simple_spread-paced"])
def test_each_remote_parallel_copy_equals_its_own_parallel_rollout_with_seed_plus_k(monkeypatch, env_id, kwargs, flags,
                                                                                     copies, servers):
    """The actor over remote copies on the parallel path writes copy k's transitions exactly as an in-process
    parallel rollout seeded seed + k; a request carries a whole cycle of each copy, a frame a group's copies
    (half a connection's), and a group's cycles are answered in one forward per policy."""
    per_frame: list[int] = []
    kinds: Counter = Counter()
    send = Connection.send

    def counting_send(self, data, instances=None):
        kinds[Kind(data[4]).name] += 1
        if data[4] == Kind.PARALLEL_STEP:
            per_frame.append(struct.unpack_from("<I", data, 5)[0])
        return send(self, data, instances)

    seed, budget = 5, 360
    actor, writers, layouts, shared = remote_parallel_actor(python_server(env_id, f"{env_args(kwargs)} {flags}"),
                                                            copies, servers=servers)
    monkeypatch.setattr(Connection, "send", counting_send)  # after the probe's own reset
    try:
        taken = actor.run(agent_steps=budget, seed=seed, keep_going=lambda: True, on_episode=lambda s: None)
    finally:
        actor.close()
    assert budget - copies * len(layouts) < taken <= budget, "whole cycles, never past the budget"
    decisions = assert_copies_are_rollouts(EnvSpec.of(env_id, **kwargs), writers, layouts, copies, seed)
    assert sum(decisions.values()) == taken and set(decisions) == set(range(copies))
    assert kinds["STEP"] == kinds["RESET"] == 0 and kinds["PARALLEL_STEP"] > 0, "the parallel API only"
    sizes = [n for local in shared.values() for n in local.module.batch_sizes]
    if not flags and copies > 2 * servers:  # groups of two copies or more
        assert max(per_frame) == -(-copies // (2 * servers)), "a frame carries a group's cycles"
        assert max(sizes) > max(len(layouts[a].obs_space.shape) for a in layouts) and max(sizes) >= 2 * 2, \
            "a group's cycles are answered in one forward"


def test_a_wrapped_env_is_observed_as_in_process_each_copy_in_frames_of_its_own():
    """The global state beside every agent's observation (a wrapper that reads what `step` returns): each copy's
    cycle is its own request, and the transitions are still the in-process parallel rollout's."""
    state = StateRequest(("agent_0", "agent_1", "agent_2"), "concat")
    actor, writers, layouts, _ = remote_parallel_actor(python_server(SPREAD, SPREAD_ARGS), 3, state=state)
    try:
        taken = actor.run(agent_steps=150, seed=2, keep_going=lambda: True, on_episode=lambda s: None)
    finally:
        actor.close()
    assert taken == 150
    assert "state" in writers["agent_0"].rows[0].obs
    assert_copies_are_rollouts(EnvSpec.of(SPREAD, **SPREAD_KWARGS).with_state(state), writers, layouts, 3, 2)


# ---------------------------------------------------------------------------------------------- the plan, a run
def test_auto_takes_the_parallel_path_where_the_server_offers_it_and_parallel_is_refused_where_not(serving):
    spread = serving(lambda: make_parallel_env(SPREAD, **SPREAD_KWARGS))
    turn_based = serving(lambda: make_env(C4))
    plan = RunPlan(spread, "random", RunConfig())
    assert plan.env_api == "parallel" and "its server offers the parallel API" in plan.auto["env_api"]
    assert RunPlan(spread, "random", RunConfig(env_api="aec")).env_api == "aec"
    assert RunPlan(turn_based, "random", RunConfig()).env_api == "aec"
    with pytest.raises(ConfigError, match=r"option env_api='parallel': env 'unix://.*': its server does not offer "
                                          r"the parallel API .*use env_api='aec'"):
        RunPlan(turn_based, "random", RunConfig(env_api="parallel"))
    # Without an env made already, asking means connecting (for a cmd: id, launching a server).
    assert choose_env_api(EnvSpec.of(spread))[0] == "parallel"
    with pytest.raises(ConfigError, match=r"option env_api='parallel': env 'cmd:.*': its server .* does not offer "
                                          r"the parallel API"):
        choose_env_api(EnvSpec.of(python_server(C4)), "parallel")


def test_a_run_over_remote_parallel_copies_gives_the_learner_the_parallel_rollouts_transitions(tmp_path):
    """Invariant 4 on the parallel path through a server: the sequential runner's learner records exactly an
    in-process parallel rollout's transitions."""
    from custom_learners import FirstLegalPolicy

    result = pzasync.SequentialRunner(python_server(SPREAD, SPREAD_ARGS),
                                      ("custom_learners:RecordingLearner", {"record_dir": str(tmp_path)}),
                                      RunConfig(seed=11, envs_per_actor=1)).run(agent_steps=150)
    assert result.agent_steps >= 150
    policy = FirstLegalPolicy()
    expected = pzasync.rollout(EnvSpec.of(SPREAD, **SPREAD_KWARGS),
                               lambda a, o, m: int(policy.act({"obs": o[None]}, None, False)[0][0]),
                               agent_steps=300, seed=11, env_api="parallel")
    for agent in ("agent_0", "agent_1", "agent_2"):
        files = sorted(tmp_path.glob(f"{agent}-*.npz"))
        got = {k: np.concatenate([np.load(f)[k] for f in files]) for k in ("obs", "action", "reward", "next_obs")}
        n = len(got["reward"])
        assert n >= 40
        for key, value in got.items():
            np.testing.assert_array_equal(value, expected[agent][key][:n], err_msg=f"{agent} {key}")


def test_the_evaluation_plays_a_served_env_through_its_parallel_api_with_the_in_process_scores(serving, monkeypatch):
    """`pzasync.evaluate` on an address whose server offers the parallel API: "auto" takes it (each evaluation copy
    a `RemoteParallelEnv`), and the games are those played in process."""
    from test_scoring import Heading

    spread = serving(lambda: make_parallel_env(SPREAD, N=3, max_cycles=10))
    local = EnvSpec.of(SPREAD, N=3, max_cycles=10)
    probe = local.make()
    layouts = env_layouts(probe, probe_info_masks(probe, seed=0))
    probe.close()
    policies = {a: (Heading(), layout) for a, layout in layouts.items()}
    kinds: Counter = Counter()
    send = Connection.send
    monkeypatch.setattr(Connection, "send", lambda self, data, instances=None: (
        kinds.update([Kind(data[4]).name]), send(self, data, instances))[1])
    scores = {}
    for name, env in (("remote", EnvSpec.of(spread)), ("local", local)):
        report = pzasync.evaluate(policies, env=env, vs="random", episodes=4, seed=3, scoring="team",
                                  baselines=False, copies=2)
        scores[name] = [r.returns for r in report.results]
    assert scores["remote"] == scores["local"] and len(scores["local"][0]) == 4
    assert kinds["PARALLEL_STEP"] >= 4 * 10 and not kinds["STEP"], "a cycle a request, on the parallel API only"


@needs_node
def test_the_node_server_stays_on_the_aec_protocol():
    """The reference server in another language says nothing of the parallel API: "auto" keeps it on the AEC path
    and "parallel" is refused, naming the env."""
    spec = EnvSpec.of(NODE_ID)
    probe = spec.make()
    try:
        assert choose_env_api(spec, "auto", probe) == ("aec", None)
        with pytest.raises(ConfigError, match=r"env 'cmd:node .*': its server does not offer the parallel API"):
            choose_env_api(spec, "parallel", probe)
    finally:
        probe.close()


# ---------------------------------------------------------------------------------------------- failures
@pytest.mark.parametrize("fault, end", [
    ("--exit-after 90", "exited with code 3"),
    pytest.param("--hang-after 90", "has not answered for 2s", marks=pytest.mark.slow),
    pytest.param(f"--exit-after 90 {PACED}", "exited with code 3", marks=pytest.mark.slow),
], ids=["dies", "hangs", "paced-dies"])
def test_when_one_of_two_servers_fails_on_the_parallel_path_the_healthy_copies_are_cut_and_nothing_is_made_up(fault,
                                                                                                             end):
    """Server 0 of two exits (or hangs) mid-run. The run ends with its error, naming it; the copies on server 1
    are cut (each copy's transitions equal a parallel rollout cut after as many decisions), and those on server 0
    keep a prefix of their rollout, with nothing completed for the cycle lost."""
    episodes: list = []
    long_episodes = {**SPREAD_KWARGS, "max_cycles": 40}
    actor, writers, layouts, _ = remote_parallel_actor(
        python_server(SPREAD, f"{env_args(long_episodes)} --index {{index}} {fault} --fault-index 0"),
        4, timeout_s=2.0, servers=2)
    try:
        with pytest.raises(RemoteEnvError) as info:
            actor.run(agent_steps=None, seed=7, keep_going=lambda: True, on_episode=episodes.append)
    finally:
        actor.close()
    message = str(info.value)
    assert "server 0" in message and "instances 0-1" in message and end in message, message
    spec = EnvSpec.of(SPREAD, **long_episodes)
    decisions = assert_copies_are_rollouts(spec, writers, layouts, 4, 7, cut_after={2: 0, 3: 0})
    for k in (2, 3):
        assert decisions[k] > 0 and sum(e.agent_steps for e in episodes if e.copy == k) == decisions[k]
    streams = {agent: per_copy(w, 4) for agent, w in writers.items()}
    n = {a: layouts[a].action_space.n for a in layouts}
    for k in (0, 1):  # server 0: a prefix of the rollout, nothing cut, no summary of the episode in flight
        expected = pzasync.rollout(spec, lambda agent, obs, mask: hashed_choice(obs, mask, n[agent]),
                                   agent_steps=decisions[k] + 30, seed=7 + k, env_api="parallel")
        for agent, by_copy in streams.items():
            rows = by_copy.get(k, [])
            got = transitions_to_arrays(rows, {agent: layouts[agent]})[agent]
            assert not got["truncated"].any(), f"copy {k} {agent}: nothing cut, nothing made up"
            for name in FIELDS:
                if name in got:
                    np.testing.assert_array_equal(got[name], expected[agent][name][:len(rows)],
                                                  err_msg=f"copy {k} {agent} {name}")
        assert not [e for e in episodes if e.copy == k and e.cut_by_actor], "no summary for a dropped episode"


def test_a_restart_budget_relaunches_a_dead_server_on_the_parallel_path(capfd):
    episodes: list = []
    actor, writers, _, _ = remote_parallel_actor(python_server(SPREAD, f"{SPREAD_ARGS} --exit-after 60"), 2,
                                                 restarts=3)
    try:
        taken = actor.run(agent_steps=150, seed=0, keep_going=lambda: True, on_episode=episodes.append)
    finally:
        actor.close()
    assert taken == 150
    assert "launching it again (2 restarts left)" in capfd.readouterr().err
    assert sum(e.cut_by_actor for e in episodes) <= 2, "only the run's end cuts episodes: the lost ones are dropped"
    assert sum(e.agent_steps for e in episodes) < 150, "no summary for an episode lost with its server"
