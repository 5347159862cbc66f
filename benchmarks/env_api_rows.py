"""Learning at equal wall time through the AEC path and the parallel path (issue 55): run the suite on each env
twice, `--env-api aec` and `--env-api parallel`, then merge the two reports of every env into one (docs/bench/
suite_env_api_10min.json, the results page's "env_api" table).

    for env in mpe2.simple_spread_v3 pettingzoo.sisl.pursuit_v5 ...; do for api in aec parallel; do
        pzasync suite --minutes 10 --seeds 1 --env-api $api --out OUT/$api-$env $env; done; done
    python benchmarks/env_api_rows.py OUT docs/bench/suite_env_api_10min.json --episodes 50
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

APIS = ("aec", "parallel")
#: What the score counts where a team's return has a name of its own (as the suite table says it).
SCORE_LABELS = {"knights_archers_zombies_v11": "zombies killed per episode (team)"}


def rescore(run_dir: str, episodes: int, seed: int, env_api: str) -> float:
    """A run's final checkpoints scored greedily over `episodes` episodes from `seed`, the env stepped through
    `env_api` whichever path trained it (the trained rows' mean)."""
    import pzasync

    report = pzasync.evaluate(run_dir, episodes=episodes, seed=seed, baselines=False, env_api=env_api)
    trained = [r.mean for r in report.results if r.policy == "trained"]
    return sum(trained) / len(trained)


def path_figures(suite: dict[str, Any], episodes: int, seed: int, env_api: str) -> dict[str, Any]:
    """One API's runs of one env: each seed's score (its checkpoints rescored over `episodes` episodes; the
    suite's own final round, over its eval_episodes, beside it) and agent steps."""
    (env,) = suite["envs"]
    runs = env["runs"]
    return {"scores": [rescore(run["run_dir"], episodes, seed, env_api) for run in runs],
            "suite_final": [run["final"] for run in runs], "suite_final_episodes": suite["settings"]["eval_episodes"],
            "agent_steps": [run["agent_steps"] for run in runs], "seeds": [run["seed"] for run in runs],
            "started": suite["started"]}


def command(envs: list[dict[str, Any]], out: Path, episodes: int) -> str:
    """The commands that reproduce a report: the suite runs (their settings as the reports recorded them), then
    this script."""
    runs = []
    for env in envs:
        settings = env["settings"]
        runs.append(f"for api in aec parallel; do pzasync suite --minutes {settings['minutes']:g} "
                    f"--seeds {settings['seeds']} --first-seed {settings['first_seed']} --env-api $api "
                    f"--out OUT/$api-{env['env']} {env['env']}; done")
    return "; ".join([*runs, f"python benchmarks/env_api_rows.py OUT {out} --episodes {episodes}"])


def merge(root: Path, episodes: int, seed: int, env_api: str, out: Path) -> dict[str, Any]:
    """Every env with both reports under `root` (aec-ENV/suite.json and parallel-ENV/suite.json)."""
    envs = []
    for aec_dir in sorted(root.glob("aec-*")):
        env_id = aec_dir.name[len("aec-"):]
        reports = {api: json.loads((root / f"{api}-{env_id}" / "suite.json").read_text()) for api in APIS
                   if (root / f"{api}-{env_id}" / "suite.json").exists()}
        if len(reports) < len(APIS):
            continue
        first = reports["aec"]["envs"][0]
        label = SCORE_LABELS.get(first["short"], "team return" if first["scoring"] == "team" else first["metric"])
        settings = reports["aec"]["settings"]
        envs.append({"env": env_id, "short": first["short"], "score": label,
                     "settings": {key: settings.get(key, 0) for key in ("minutes", "seeds", "first_seed")},
                     "random": first["baselines"]["random"]["score"],
                     "untrained": first["baselines"]["untrained"]["score"],
                     **{api: path_figures(reports[api], episodes, seed, env_api) for api in APIS}})
    return {"what": "pzasync suite on simultaneous-move envs with each env's recipe, the same seeds, 10 minutes each, "
                    "through the AEC path (--env-api aec: agent_iter, one decision at a time, batched across env "
                    "copies) and the parallel path (--env-api parallel: every live agent of a cycle in one forward "
                    "per policy); scores: each run's final checkpoints, greedy, over `episodes` episodes from "
                    "`seed` (the suite's own final round beside them)",
            "episodes": episodes, "seed": seed, "scored_through": env_api,
            "command": command(envs, out, episodes), "envs": envs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", type=Path, help="the directory holding aec-ENV/ and parallel-ENV/ suite outputs")
    parser.add_argument("out", type=Path)
    parser.add_argument("--episodes", type=int, default=50, help="episodes each run's checkpoints are scored over")
    parser.add_argument("--seed", type=int, default=10007, help="the first episode's seed (the suite table's)")
    parser.add_argument("--env-api", default="aec", choices=("aec", "parallel"),
                        help="the API every run is scored through, whichever trained it (default: aec, the "
                             "suite's scoring before the parallel path)")
    parser.add_argument("--note", default="", help="what a reader should know about these runs (the report's note)")
    args = parser.parse_args()
    merged = merge(args.root, args.episodes, args.seed, args.env_api, args.out)
    if args.note:
        merged["note"] = args.note
    args.out.write_text(json.dumps(merged, indent=1) + "\n")
    print(f"{args.out}: {len(merged['envs'])} envs")


if __name__ == "__main__":
    main()
