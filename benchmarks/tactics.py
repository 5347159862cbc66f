"""Count the tactical mistakes of a trained connect_four run against the one-ply player (its figures:
docs/bench/default_run_c4.json, table "tactics").

    python benchmarks/tactics.py RUN_DIR [--episodes 200] [--seed 0]

Plays each seat's greedy policy against `one_ply` and, at every decision of the trained policy, checks with
the one-ply player's own bitboard code:

- **missed win**: a move wins at once, and the policy played another;
- **missed block**: it could not win, the opponent threatened exactly one immediate win, and the policy did
  not play there (one_ply then wins);
- **faced a double threat**: two or more immediate wins for the opponent, no win of its own: the game is lost
  whatever it plays (the mistake was earlier);
- **handed a win**: its move (neither a win nor a forced block) made a cell playable on which the opponent
  completes a four.

Prints one row per seat: games, win/draw/loss, and each count per game. For a Q-network (DQN) also the mean
Q-value of the winning move where it was missed and where it was taken, and of the move chosen instead.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import torch

from pzasync.evaluation.evaluate import load_run_policies, play, player_actor, resolve_player
from pzasync.learners.dqn import QNetwork
from pzasync.learners.networks import obs_tensors
from pzasync.players.boards import ConnectFour


def audit(policy, layout, tally: dict[str, int], values: dict[str, list[float]]):
    """An act function playing `policy` greedily and counting its mistakes into `tally` (and, for a
    Q-network, the Q-values at immediate wins into `values`)."""
    game = ConnectFour

    def act(agent, obs, mask):
        batch = layout.batch([obs])
        actions, _ = policy.act(batch, None if mask is None else mask[None], False)
        action = int(actions[0])
        q = None
        if isinstance(policy, QNetwork):
            with torch.no_grad():
                q = policy(obs_tensors(batch, layout)).numpy()[0]
        board = obs["obs"] if isinstance(obs, dict) else obs
        me, opp = game.from_obs(board)
        legal = [int(a) for a in np.flatnonzero(mask)] if mask is not None else list(range(7))
        bits = {a: game.move_bit(me, opp, a) for a in legal}
        wins = [a for a, bit in bits.items() if bit and game.won(me | bit)]
        blocks = [a for a, bit in bits.items() if bit and game.won(opp | bit)]
        tally["decisions"] += 1
        if wins:
            tally["missed_win"] += action not in wins
            if q is not None:
                best = float(max(q[a] for a in wins))
                if action in wins:
                    values["q_win_where_taken"].append(best)
                else:
                    values["q_win_where_missed"].append(best)
                    values["q_chosen_where_missed"].append(float(q[action]))
        elif len(blocks) == 1:
            tally["missed_block"] += action != blocks[0]
        elif len(blocks) >= 2:
            tally["faced_double_threat"] += 1
        else:
            above = bits[action] << 1
            if above & game.BOARD and game.won(opp | above):
                tally["handed_win"] += 1
        return action

    return act


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir")
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--env", default="pettingzoo.classic.connect_four_v3")
    args = parser.parse_args()
    policies = load_run_policies(args.run_dir)
    agents = sorted(policies)
    rows = []
    for i, seat in enumerate(agents):
        policy, layout = policies[seat]
        tally = dict.fromkeys(("decisions", "missed_win", "missed_block", "faced_double_threat", "handed_win"), 0)
        values: dict[str, list[float]] = {"q_win_where_taken": [], "q_win_where_missed": [],
                                          "q_chosen_where_missed": []}
        actors = {seat: audit(policy, layout, tally, values)}
        for other in agents:
            if other != seat:
                cls, options = resolve_player("one_ply", other, policies[other][1])
                actors[other] = player_actor(cls, options, policies[other][1], args.seed + 17 * i)
        games = play(args.env, actors, args.episodes, args.seed + i)
        wins = sum(g.returns[seat] > 0 for g in games)
        losses = sum(g.returns[seat] < 0 for g in games)
        row = {"seat": seat, "games": len(games), "win": wins / len(games), "loss": losses / len(games),
               **tally,
               **{f"{k}_per_game": round(v / len(games), 3) for k, v in tally.items() if k != "decisions"},
               **{f"mean_{k}": round(float(np.mean(v)), 3) for k, v in values.items() if v}}
        rows.append(row)
        print(json.dumps(row))


if __name__ == "__main__":
    main()
