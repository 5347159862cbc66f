"""Train connect_four by self-play, then play against the result in the terminal.

Run: python examples/connect_four_selfplay.py [--minutes M | --steps N] [--play] [--run-dir DIR]

Both players learn at once (one DQN learner process each, async). With --play you then take a seat against the
trained agent: type a column number (0-6) for each move. --run-dir skips training and loads a previous run.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

ENV = "pettingzoo.classic.connect_four_v3"
SYMBOLS = {0: ".", 1: "X", 2: "O"}


def board_text(env) -> str:
    """The board from the raw env, row 0 at the top; X is player_0, O is player_1."""
    board = np.asarray(env.unwrapped.board).reshape(6, 7)
    rows = [" ".join(SYMBOLS[int(v)] for v in row) for row in board]
    return "\n".join(rows + ["-" * 13, " ".join(str(c) for c in range(7))])


def ask_move(mask: np.ndarray) -> int:
    """A legal column from stdin; EOF ends the game."""
    while True:
        line = sys.stdin.readline()
        if not line:
            raise EOFError
        text = line.strip()
        if text.isdigit() and int(text) < len(mask) and mask[int(text)]:
            return int(text)
        print(f"  choose one of the open columns {np.flatnonzero(mask).tolist()}: ", end="", flush=True)


def play(run_dir: str, human: str = "player_1") -> float:
    """One game, the human as `human`; returns the human's result (+1 win, 0 draw, -1 loss)."""
    from pzasync.core.environments import make_env
    from pzasync.evaluation.evaluate import load_run_policies, policy_actor

    policies = load_run_policies(run_dir)
    env = make_env(ENV)
    env.reset(seed=None)
    result = 0.0
    for agent in env.agent_iter():
        obs, reward, terminated, truncated, _ = env.last()
        if terminated or truncated:
            if agent == human:
                print(board_text(env))
                print({1: "you win!", 0: "draw", -1: "the agent wins"}[int(reward)])
                result = float(reward)
            env.step(None)
            continue
        if agent == human:
            print(board_text(env))
            print(f"your move ({SYMBOLS[2 if human == 'player_1' else 1]}): ", end="", flush=True)
            env.step(ask_move(obs["action_mask"]))
        else:
            policy, layout = policies[agent]
            env.step(int(policy_actor(policy, layout)(agent, obs["observation"], obs["action_mask"].astype(bool))))
    env.close()
    return result


def main() -> None:
    from pzasync import AsyncRunner, RunConfig

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--steps", type=int, default=None, help="agent steps instead of --minutes")
    parser.add_argument("--play", action="store_true", help="play a game against the trained player_0")
    parser.add_argument("--run-dir", default=None, help="load this run instead of training")
    parser.add_argument("--out", default="runs")
    args = parser.parse_args()
    run_dir = args.run_dir
    if run_dir is None:
        runner = AsyncRunner(ENV, "dqn", RunConfig(seed=0, out_dir=args.out, progress=sys.stdout.isatty()))
        result = runner.run(agent_steps=args.steps, seconds=None if args.steps else args.minutes * 60)
        run_dir = result.run_dir
        print(f"trained {result.agent_steps:,} agent steps, {result.episodes:,} games: {run_dir}")
    if args.play:
        try:
            play(run_dir)
        except EOFError:
            print("\n(no more input: game abandoned)")


if __name__ == "__main__":
    main()
