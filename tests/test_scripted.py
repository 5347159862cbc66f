"""Scripted yardstick players (one_ply, negamax, perfect), users' own players, and evaluation against them.

Correctness is checked through the real PettingZoo envs: positions come from random play in the env, and
whether a move wins is what the env says after stepping it. An independent numpy line scan finds the
opponent's threats; it is itself checked against the env (it must find exactly the env's winning moves),
which also pins down the conventions the players rely on (plane 0 = the mover, connect four pieces fall
to the highest-index empty row, tictactoe action a = cell [a // 3, a % 3]).
"""

from __future__ import annotations

import custom_players
import numpy as np
import pytest
import torch
from click.testing import CliRunner
from gymnasium import spaces
from pettingzoo.classic import connect_four_v3, tictactoe_v3

from pzasync import RunConfig, SequentialRunner
from pzasync.cli import main
from pzasync.core.spaces import agent_layout, env_layouts, probe_info_masks
from pzasync.errors import ConfigError, UnsupportedSpaceError
from pzasync.evaluation.evaluate import evaluate_against, load_run_policies, untrained_baseline
from pzasync.learners import SCRIPTED, is_scripted, resolve_learner
from pzasync.learners.scripted import NegamaxPlayer, ScriptedPlayer
from pzasync.players.boards import ConnectFour, TicTacToe
from pzasync.runners import AsyncRunner

torch.set_num_threads(1)

ENVS = {"connect_four": connect_four_v3, "tictactoe": tictactoe_v3}
ENV_IDS = {"connect_four": "pettingzoo.classic.connect_four_v3", "tictactoe": "pettingzoo.classic.tictactoe_v3"}
LINE = {"connect_four": 4, "tictactoe": 3}
C4, TTT = ENV_IDS["connect_four"], ENV_IDS["tictactoe"]


def layouts(game: str) -> dict:
    env = ENVS[game].env()
    try:
        return env_layouts(env, probe_info_masks(env, seed=0))
    finally:
        env.close()


def build(game: str, spec, seed: int = 0, agent: str | None = None):
    """A scripted player's policy for one agent of `game`, as the runtime builds it."""
    lays = layouts(game)
    agent = agent or next(iter(lays))
    cls, options = resolve_learner(spec, agent)
    cls.check_spaces(lays[agent])
    policy = cls.build_policy(lays[agent], cls.validate_config(agent, options))
    policy.seed(seed)
    return policy


def act(policy, obs) -> int:
    return int(policy.act({"obs": obs["observation"][None]}, obs["action_mask"][None].astype(bool), False)[0][0])


# ------------------------------------------------------------------------------------------ env oracle
def replay(env, moves):
    env.reset(seed=0)
    for m in moves:
        env.step(m)
    return env


def mover_wins(env, moves, action) -> bool:
    """Step the real env: does `action` end the game with a win for the player to move?"""
    replay(env, moves)
    mover = env.agent_selection
    env.step(action)
    return bool(env.terminations[mover]) and env.rewards[mover] == 1


def opponent_can_win_after(env, moves, action) -> bool:
    """After `action`, does any reply of the opponent win at once (per the env)?"""
    replay(env, moves)
    env.step(action)
    obs, _, term, trunc, _ = env.last()
    if term or trunc:
        return False
    return any(mover_wins(env, moves + [action], r) for r in np.flatnonzero(obs["action_mask"]))


def has_line(plane: np.ndarray, k: int) -> bool:
    H, W = plane.shape
    h, v = np.ones((H, W - k + 1), bool), np.ones((H - k + 1, W), bool)
    d1, d2 = np.ones((H - k + 1, W - k + 1), bool), np.ones((H - k + 1, W - k + 1), bool)
    for i in range(k):
        h &= plane[:, i:W - k + 1 + i] > 0
        v &= plane[i:H - k + 1 + i, :] > 0
        d1 &= plane[i:H - k + 1 + i, i:W - k + 1 + i] > 0
        d2 &= plane[i:H - k + 1 + i, k - 1 - i:W - i] > 0
    return bool(h.any() or v.any() or d1.any() or d2.any())


def winning_actions(board: np.ndarray, plane: int, game: str) -> list[int]:
    """Independent of the players' bitboards: actions that would complete a line for `plane`'s pieces."""
    taken = board[..., 0] + board[..., 1]
    out = []
    for a in range(board.shape[1] if game == "connect_four" else 9):
        if game == "tictactoe":
            cell = divmod(a, 3)
            if taken[cell]:
                continue
        else:
            empty = np.flatnonzero(taken[:, a] == 0)
            if not empty.size:
                continue
            cell = (int(empty.max()), a)
        pieces = board[..., plane].copy()
        pieces[cell] = 1
        if has_line(pieces, LINE[game]):
            out.append(a)
    return out


_POSITIONS: dict[str, list[dict]] = {}


def positions(game: str, n: int = 300) -> list[dict]:
    """`n` non-terminal positions reached by random play in the real env, with the env's verdicts."""
    if game in _POSITIONS:
        return _POSITIONS[game]
    env = ENVS[game].env()
    rng = np.random.default_rng(7)
    out = []
    while len(out) < n:
        env.reset(seed=0)
        moves: list[int] = []
        for _ in range(int(rng.integers(0, 36 if game == "connect_four" else 8))):
            obs, _, term, trunc, _ = env.last()
            if term or trunc:
                break
            moves.append(int(rng.choice(np.flatnonzero(obs["action_mask"]))))
            env.step(moves[-1])
        obs, _, term, trunc, _ = env.last()
        if term or trunc:
            continue
        legal = [int(a) for a in np.flatnonzero(obs["action_mask"])]
        wins = [a for a in legal if mover_wins(env, moves, a)]
        board = obs["observation"]
        assert wins == winning_actions(board, 0, game), "the line scan must agree with the env"
        threats = winning_actions(board, 1, game)
        safe_block = len(threats) == 1 and not wins and not opponent_can_win_after(env, moves, threats[0])
        out.append({"moves": moves, "obs": obs, "wins": wins, "threats": threats, "safe_block": safe_block})
    env.close()
    _POSITIONS[game] = out
    return out


PLAYERS = [pytest.param("connect_four", "one_ply", marks=pytest.mark.slow),  # 4 s: in the slow tier
           ("tictactoe", "one_ply"), ("connect_four", ("negamax", {"depth": 2})),
           ("connect_four", "negamax"), ("tictactoe", "negamax"), ("tictactoe", "perfect")]


def test_conventions_of_the_real_envs():
    """What the players assume about the observations, checked on the envs themselves."""
    env = connect_four_v3.env()
    env.reset(seed=0)
    env.step(3)
    obs, *_ = env.last()
    assert obs["observation"][5, 3, 1] == 1 and obs["observation"].sum() == 1, "falls to row 5, opponent plane"
    assert ConnectFour.from_obs(obs["observation"]) == (0, 1 << (7 * 3)), "bottom of column 3 in the bitboard"
    env = tictactoe_v3.env()
    for a in range(9):
        env.reset(seed=0)
        env.step(a)
        obs, *_ = env.last()
        assert obs["observation"][a // 3, a % 3, 1] == 1 and obs["observation"].sum() == 1
        assert TicTacToe.from_obs(obs["observation"]) == (0, 1 << a)


@pytest.mark.parametrize("game,spec", PLAYERS, ids=lambda x: str(x))
def test_takes_every_available_win(game, spec):
    policy = build(game, spec, seed=3)
    env = ENVS[game].env()
    checked = 0
    for pos in positions(game):
        if pos["wins"]:
            action = act(policy, pos["obs"])
            assert mover_wins(env, pos["moves"], action), f"{spec} missed a win in {pos['moves']}: {action}"
            checked += 1
    assert checked >= 30, f"only {checked} positions with a win to take"


@pytest.mark.parametrize("game,spec", PLAYERS, ids=lambda x: str(x))
def test_blocks_a_single_immediate_threat(game, spec):
    policy = build(game, spec, seed=4)
    env = ENVS[game].env()
    checked = several = 0
    for pos in positions(game):
        if pos["safe_block"]:
            action = act(policy, pos["obs"])
            assert action == pos["threats"][0], f"{spec} did not block {pos['threats']} in {pos['moves']}"
            assert not opponent_can_win_after(env, pos["moves"], action)
            checked += 1
        elif spec == "one_ply" and not pos["wins"] and len(pos["threats"]) > 1:
            assert act(policy, pos["obs"]) in pos["threats"], "with several threats one_ply blocks one of them"
            several += 1
    assert checked >= 15, f"only {checked} positions with a single threat"
    assert spec != "one_ply" or game != "connect_four" or several >= 3


def seats(game: str, spec, seed: int = 0) -> dict:
    lays = layouts(game)
    out = {}
    for i, (agent, layout) in enumerate(lays.items()):
        cls, options = resolve_learner(spec, agent)
        policy = cls.build_policy(layout, cls.validate_config(agent, options))
        policy.seed(seed + i)
        out[agent] = (policy, layout)
    return out


@pytest.mark.timeout(60)
def test_perfect_tictactoe_never_loses():
    perfect = seats("tictactoe", "perfect", seed=1)
    for opponent, episodes in (("random", 200), ("perfect", 50), ("negamax", 50), ("one_ply", 50),
                               ("negamax,depth=1", 50)):
        for r in evaluate_against(TTT, perfect, opponent, episodes, seed=11):
            losses = r.episodes - r.wins - r.draws
            assert r.episodes == episodes and losses == 0, f"{r.agent} lost {losses} against {opponent}"
            if opponent == "random":
                assert r.win_rate > 0.7, "a perfect player beats random play most of the time"
            if opponent == "perfect":
                assert r.draws == episodes


@pytest.mark.timeout(60)
def test_negamax_beats_one_ply_at_connect_four():
    for depth, episodes in ((2, 40), (4, 20)):
        for r in evaluate_against(C4, seats("connect_four", ("negamax", {"depth": depth}), seed=2), "one_ply",
                                  episodes, seed=5):
            losses = r.episodes - r.wins - r.draws
            assert r.wins >= 0.7 * episodes and r.wins > 3 * losses, f"depth {depth} {r.agent}: {r.wins}/{losses}"


def test_ties_are_broken_by_the_seeded_rng_and_rows_are_batched():
    env = connect_four_v3.env()
    env.reset(seed=0)
    obs, *_ = env.last()
    batch = {"obs": np.repeat(obs["observation"][None], 64, 0)}
    mask = np.ones((64, 7), bool)
    a = build("connect_four", "one_ply", seed=9).act(batch, mask, False)[0]
    b = build("connect_four", "one_ply", seed=9).act(batch, mask, False)[0]
    c = build("connect_four", "one_ply", seed=10).act(batch, mask, False)[0]
    assert a.shape == (64,) and (a == b).all() and (a != c).any() and len(set(a.tolist())) == 7
    mask[:, :6] = False
    assert (build("connect_four", "one_ply").act(batch, mask, False)[0] == 6).all(), "only legal moves"
    first = build("tictactoe", "perfect", seed=1).act(
        {"obs": np.zeros((200, 3, 3, 2), np.int8)}, np.ones((200, 9), bool), False)[0]
    assert len(set(first.tolist())) == 9, "every opening move is optimal in tictactoe: all get picked"


def test_unsupported_envs_and_bad_options_are_refused():
    c4 = layouts("connect_four")["player_0"]
    with pytest.raises(UnsupportedSpaceError, match=r"agent 'player_0'.*supports only pettingzoo.classic.tictactoe_v3"):
        resolve_learner("perfect")[0].check_spaces(c4)
    vec = agent_layout("walker_0", spaces.Box(-1, 1, (4,), np.float32), spaces.Discrete(3))
    for name in SCRIPTED:
        with pytest.raises(UnsupportedSpaceError, match="walker_0"):
            resolve_learner(name)[0].check_spaces(vec)
    with pytest.raises(UnsupportedSpaceError, match="connect_four_v3 and pettingzoo.classic.tictactoe_v3"):
        resolve_learner("one_ply")[0].check_spaces(vec)
    for depth in (0, -1, 2.5, "3", True):
        with pytest.raises(ConfigError, match=r"'player_0': NegamaxPlayer option depth=.*must be an integer >= 1"):
            NegamaxPlayer.validate_config("player_0", {"depth": depth})
    assert NegamaxPlayer.validate_config("player_0", {})["depth"] == 4
    with pytest.raises(ConfigError, match="no option"):
        NegamaxPlayer.validate_config("player_0", {"dept": 3})
    assert all(not resolve_learner(n)[0].learns for n in SCRIPTED)


# ------------------------------------------------------------------------------------------ users' players
def test_user_function_and_policy_classes_resolve_to_never_learning_players():
    lay = layouts("tictactoe")["player_1"]
    cls, options = resolve_learner("custom_players:centre_first", "player_1")
    assert cls is ScriptedPlayer and not cls.learns and options == {"player": "custom_players:centre_first"}
    mask = np.ones((2, 9), bool)
    mask[1, 4] = False
    obs = {"obs": np.zeros((2, 3, 3, 2), np.int8)}
    policy = cls.build_policy(lay, cls.validate_config("player_1", options))
    assert policy.act(obs, mask, True)[0].tolist() == [4, 0]
    last = resolve_learner("custom_players.LastLegalPolicy")
    assert last[0] is ScriptedPlayer
    assert last[0].build_policy(lay, last[1]).act(obs, mask, False)[0].tolist() == [8, 8], "built with the layout"
    first = resolve_learner(("custom_players:FirstLegalNoArgs", {}))
    assert first[0].build_policy(lay, first[1]).act(obs, mask, False)[0].tolist() == [0, 0], "built without"
    from custom_players import centre_first

    direct = resolve_learner(centre_first)
    assert direct == (ScriptedPlayer, {"player": "custom_players:centre_first"}), "objects recorded by path"
    assert is_scripted("custom_players:centre_first") and is_scripted(("negamax", {"depth": 2}))
    assert not is_scripted("dqn") and not is_scripted("no_such_player")
    with pytest.raises(ConfigError, match="neither a subclass of pzasync.Learner nor a player"):
        resolve_learner("custom_players:NOT_A_PLAYER", "player_1")
    with pytest.raises(ConfigError, match="no option"):
        ScriptedPlayer.validate_config("player_1", {"player": "custom_players:centre_first", "depth": 2})
    with pytest.raises(ConfigError, match="has no learner class"):
        resolve_learner("custom_players:missing", "player_1")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("runner,player,counter", [
    (SequentialRunner, "custom_players:centre_first", "centre_first"),
    (SequentialRunner, "one_ply", None),
    (AsyncRunner, "custom_players:LastLegalPolicy", "last_legal"),
], ids=["sequential-function", "sequential-one_ply", "async-policy-class"])
def test_scripted_players_are_learner_specs_in_the_runners(runner, player, counter, tmp_path):
    before = custom_players.CALLS[counter] if counter else 0
    learners = {"player_1": ("dqn", {"learning_starts": 32, "batch_size": 16}), "player_2": player}
    result = runner(TTT, learners, RunConfig(seed=0, out_dir=str(tmp_path))).run(agent_steps=300)
    assert result.agents["player_2"].learner == player and result.agents["player_1"].updates > 0
    assert result.episodes > 0 and result.agents["player_2"].updates == 0
    if counter:
        assert custom_players.CALLS[counter] - before >= 100, "the user's player made player_2's moves"
    (run_dir,) = list(tmp_path.iterdir())
    assert (run_dir / "checkpoints" / "player_1.pt").exists()
    assert not (run_dir / "checkpoints" / "player_2.pt").exists(), "a scripted player has nothing to save"


# ------------------------------------------------------------------------------------------ evaluation
def test_evaluate_against_scripted_players_and_untrained_baseline():
    randoms = seats("tictactoe", "random", seed=3)
    one_ply = evaluate_against(TTT, randoms, "one_ply", 100, seed=21)
    assert [r.agent for r in one_ply] == ["player_1", "player_2"] and {r.opponent for r in one_ply} == {"one_ply"}
    vs_random = evaluate_against(TTT, randoms, "random", 100, seed=21)
    for strong, weak in zip(one_ply, vs_random):
        assert strong.wins < weak.wins and strong.episodes - strong.wins - strong.draws > 30, \
            "random play loses far more against one_ply than against random"
    def first_seat():  # a freshly seeded random player_1 (the policy's RNG advances as it plays)
        return {"player_1": seats("tictactoe", "random", seed=3)["player_1"]}

    (named,) = evaluate_against(TTT, first_seat(), ("negamax", {"depth": 2}), 20, seed=1)
    assert named.opponent == "negamax,depth=2"
    (text,) = evaluate_against(TTT, first_seat(), "negamax,depth=2", 20, seed=1)
    assert text.opponent == "negamax,depth=2" and text.returns == named.returns, "seeded from `seed`"
    (user,) = evaluate_against(TTT, first_seat(), "custom_players:centre_first", 20, seed=1)
    assert user.opponent == "custom_players:centre_first" and user.episodes == 20
    with pytest.raises(ConfigError, match="is a learner that trains"):
        evaluate_against(TTT, randoms, "dqn", 5)
    with pytest.raises(UnsupportedSpaceError, match="supports only"):
        evaluate_against(C4, seats("connect_four", "random"), "perfect", 5)
    base = untrained_baseline(TTT, {"player_1": "dqn", "player_2": "one_ply"}, "one_ply", 40, seed=4)
    again = untrained_baseline(TTT, {"player_1": "dqn", "*": "random"}, "one_ply", 40, seed=4)
    assert [r.agent for r in base] == ["player_1"], "only learning agents have a baseline"
    assert base[0].opponent == "one_ply" and base[0].returns == again[0].returns, "seeded: reproducible"
    other_seed = untrained_baseline(TTT, "dqn", "one_ply", 40, seed=5)
    assert [r.agent for r in other_seed] == ["player_1", "player_2"]


@pytest.mark.timeout(120)
def test_cli_eval_versus_scripted_players(tmp_path):
    learners = {"player_1": ("dqn", {"learning_starts": 32, "batch_size": 16}), "player_2": "random"}
    result = SequentialRunner(TTT, learners, RunConfig(seed=0, out_dir=str(tmp_path))).run(agent_steps=300)
    run_dir = str(result.run_dir)
    cli = CliRunner()
    for versus in ("one_ply", "negamax,depth=2", "perfect", "custom_players:centre_first", "random"):
        out = cli.invoke(main, ["eval", run_dir, "--vs", versus, "--episodes", "20"], env={"COLUMNS": "250"})
        assert out.exit_code == 0, out.output
        assert f"vs {versus}, 20 episodes per agent" in out.output and "player_1" in out.output
    policies = load_run_policies(run_dir)
    (expected,) = evaluate_against(TTT, policies, "one_ply", 20, seed=12345)
    out = cli.invoke(main, ["eval", run_dir, "--vs", "one_ply", "--episodes", "20"], env={"COLUMNS": "250"})
    assert f"{expected.wins}/{expected.draws}/{expected.episodes - expected.wins - expected.draws}" in out.output
    bad = cli.invoke(main, ["eval", run_dir, "--vs", "one_plie"], env={"COLUMNS": "250"})
    assert bad.exit_code == 2 and "Traceback" not in bad.output
    assert "--vs 'one_plie' is neither a run directory nor a known player" in bad.output
    assert "one_ply, negamax[,depth=N], perfect" in bad.output and "did you mean 'one_ply'" in bad.output
    learner = cli.invoke(main, ["eval", run_dir, "--vs", "dqn"], env={"COLUMNS": "250"})
    assert learner.exit_code == 2 and "is a learner that trains" in learner.output
