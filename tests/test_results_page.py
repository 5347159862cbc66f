"""The results page, docs/benchmarks.md (benchmarks/results_page.py): its tables are what the reports in
docs/bench/ give, each names the command that reproduces it and the reports it came from, and every link on the
page, and every link into it from the other docs, leads somewhere. Reads JSON only: nothing is run."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
PAGE = ROOT / "docs" / "benchmarks.md"


@pytest.fixture(scope="module")
def results_page():
    spec = importlib.util.spec_from_file_location("results_page", ROOT / "benchmarks" / "results_page.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def blocks(page: str) -> dict[str, str]:
    found = re.finditer(r"<!-- table:([\w-]+) -->\n(.*?)<!-- /table -->", page, re.DOTALL)
    return {m.group(1): m.group(2) for m in found}


def test_the_page_is_what_its_reports_give(results_page):
    """`python benchmarks/results_page.py --check` passes: no table was edited by hand or left behind its report."""
    page = PAGE.read_text()
    assert results_page.stale(page) == [], "run: python benchmarks/results_page.py"
    assert results_page.main(["--check"]) == 0
    assert set(blocks(page)) == set(results_page.TABLES), "a generator without a place on the page, or the reverse"


def test_check_names_a_table_edited_by_hand(results_page, tmp_path, capsys):
    page = PAGE.read_text()
    table = next(iter(blocks(page)))
    edited = page.replace(f"<!-- table:{table} -->\n|", f"<!-- table:{table} -->\n| edited", 1)
    (tmp_path / "page.md").write_text(edited)
    assert results_page.main(["--check", "--page", str(tmp_path / "page.md")]) == 1
    assert table in capsys.readouterr().err
    assert results_page.main(["--page", str(tmp_path / "page.md")]) == 0
    assert (tmp_path / "page.md").read_text() == page


def test_every_table_names_its_reports_and_how_to_reproduce_them():
    """Each table ends with its reports; each report it draws on first has a "command" key (or the table gives a
    command per row), and a transcribed one says where its figures came from."""
    for name, block in blocks(PAGE.read_text()).items():
        reports = re.findall(r"\(bench/([\w.-]+)\.json\)", block)
        assert reports, name
        first = json.loads((ROOT / "docs" / "bench" / f"{reports[0]}.json").read_text())
        assert "command" in first, (name, reports[0])
        assert "Command:" in block or first["command"] == "see each row", name
        for report in reports:
            data = json.loads((ROOT / "docs" / "bench" / f"{report}.json").read_text())
            if "tables" in data:
                assert data["source"].startswith("transcribed from docs/benchmarks.md at "), report


def test_the_page_keeps_to_results():
    """A results page, not a diary: at most about 400 lines, no first-person notes, no dated entries in headings."""
    page = PAGE.read_text()
    assert len(page.splitlines()) <= 420
    prose = re.sub(r"<!-- table:.*?<!-- /table -->", "", page, flags=re.DOTALL)
    assert not re.search(r"\b(I|I'm|I've|my|we)\b", prose)
    assert not [line for line in page.splitlines() if line.startswith("#") and re.search(r"\d{4}-\d{2}-\d{2}", line)]


def test_every_link_on_the_page_and_into_it_resolves(results_page):
    page = PAGE.read_text()
    anchors = results_page.anchors(page)
    for target in re.findall(r"\]\(([^)\s]+)\)", page):
        if target.startswith("#"):
            assert target[1:] in anchors, target
        elif not target.startswith("http"):
            assert (PAGE.parent / target.partition("#")[0]).exists(), target
    for doc in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        for anchor in re.findall(r"benchmarks\.md#([\w-]+)", doc.read_text()):
            assert anchor in anchors, (doc.name, anchor)


def test_every_plot_and_report_in_docs_bench_is_linked():
    page = PAGE.read_text()
    for path in (ROOT / "docs" / "bench").iterdir():
        if path.suffix in (".json", ".png"):
            assert f"(bench/{path.name})" in page, path.name


def test_anchors_follow_github(results_page):
    page = "# Peers: SB3 + SuperSuit PPO\n```\n# not a heading\n```\n## `pzasync bench`: async\n### x\n### x\n"
    assert results_page.anchors(page) == {"peers-sb3--supersuit-ppo", "pzasync-bench-async", "x", "x-1"}


def test_env_api_rows_pairs_each_paths_seeds_and_records_the_suite_command(monkeypatch, tmp_path):
    """benchmarks/env_api_rows.py merges an env's two suite reports: each path's seeds with their scores (the
    rescoring stubbed: a figure per run directory) and agent steps, and the command that reruns them, the suite's
    own seeds and first seed in it."""
    spec = importlib.util.spec_from_file_location("env_api_rows", ROOT / "benchmarks" / "env_api_rows.py")
    rows = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rows)
    scores = {}
    for api, steps in (("aec", 1000), ("parallel", 1300)):
        runs = []
        for seed in (1, 2):
            run_dir = str(tmp_path / api / f"seed{seed}")
            scores[run_dir] = -40.0 - seed - (api == "parallel")
            runs.append({"seed": seed, "run_dir": run_dir, "agent_steps": steps * seed, "final": -50.0})
        env = {"env": "mpe2.simple_spread_v3", "short": "simple_spread_v3", "metric": "mean return", "scoring": "team",
               "baselines": {"random": {"score": -84.0}, "untrained": {"score": -125.0}}, "runs": runs}
        suite = {"started": "2026-11-29T00:00:00+0000", "envs": [env],
                 "settings": {"minutes": 10.0, "seeds": 2, "first_seed": 1, "eval_episodes": 10}}
        (tmp_path / f"{api}-mpe2.simple_spread_v3").mkdir()
        (tmp_path / f"{api}-mpe2.simple_spread_v3" / "suite.json").write_text(json.dumps(suite))
    monkeypatch.setattr(rows, "rescore", lambda run_dir, episodes, seed, env_api: scores[run_dir])
    merged = rows.merge(tmp_path, 50, 10007, "aec", Path("docs/bench/out.json"))
    (env,) = merged["envs"]
    assert env["aec"]["seeds"] == env["parallel"]["seeds"] == [1, 2]
    assert env["aec"]["scores"] == [-41.0, -42.0] and env["parallel"]["scores"] == [-42.0, -43.0]
    assert env["parallel"]["agent_steps"] == [1300, 2600]
    assert "--seeds 2 --first-seed 1 --env-api $api" in merged["command"]
    assert merged["command"].endswith("env_api_rows.py OUT docs/bench/out.json --episodes 50")


def test_env_api_train_rows_scores_each_run_once_and_pairs_the_paths_seeds(monkeypatch, tmp_path):
    """benchmarks/env_api_train_rows.py reads `pzasync train` runs of each path and seed: agent steps from
    result.json, each side's training return summed over its members, the score (mean over the scored sides) from
    the evaluation kept beside the runs, and evaluates again only where that one was of other episodes."""
    spec = importlib.util.spec_from_file_location("env_api_train_rows", ROOT / "benchmarks" / "env_api_train_rows.py")
    rows = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rows)

    def document(run_dir: str, score: float, episodes: int = 10, baselines: bool = False) -> dict:
        results = [{"unit": side, "policy": "trained", "mean_return": score + (side == "blue")}
                   for side in ("red", "blue")]
        if baselines:
            results += [{"unit": side, "policy": policy, "mean_return": value} for side in ("red", "blue")
                        for policy, value in (("random", -3000.0), ("untrained", -400.0))]
        return {"env": "magent2.environments.battle_v4", "run_dir": run_dir, "scoring": "sides", "episodes": episodes,
                "seed": 10007, "seconds": 60.0, "results": results}

    for api, steps in (("aec", 1000), ("parallel", 4000)):
        for seed in (0, 1):
            run = tmp_path / f"{api}-{seed}" / "battle_v4-1"
            run.mkdir(parents=True)
            (run / "result.json").write_text(json.dumps({"agent_steps": steps + seed, "wall_seconds": 600.4}))
            (run / "episodes.jsonl").write_text(json.dumps(
                {"wall_s": 50.0, "returns": {"red_0": 1.0, "red_1": 2.0, "blue_0": -1.0, "blue_1": 0.0}}) + "\n")
            score = -100.0 * seed - (api == "parallel")
            stale = (api, seed) == ("parallel", 1)  # its kept evaluation played other episodes: evaluated again
            (tmp_path / f"eval-{api}-{seed}.json").write_text(json.dumps(document(
                str(run), 0.0 if stale else score, episodes=5 if stale else 10, baselines=(api, seed) == ("aec", 0))))
            for acting, episodes in (("greedy", 1), ("sampled", 4)):  # this path's sides against the other's
                (tmp_path / f"h2h-{api}-{acting}-{seed}.json").write_text(json.dumps({
                    "episodes": episodes, "seed": 10007, "results": [
                        {"unit": side, "policy": "trained", "mean_return": 10.0 * seed + len(api) + episodes
                         + (side == "red")} for side in ("red", "blue")]}))
            (tmp_path / f"h2h-{api}-greedy-{seed}-vs-{1 - seed}.json").write_text(json.dumps({  # across seeds
                "episodes": 1, "seed": 10007, "results": [
                    {"unit": side, "policy": "trained", "mean_return": 100.0 * seed + len(api) + (side == "red")}
                    for side in ("red", "blue")]}))
    evaluated = []

    class Report:
        def __init__(self, run_dir: str) -> None:
            self.run_dir = run_dir

        def to_json(self) -> dict:
            return document(self.run_dir, -101.0)

    def evaluate(run_dir: str, **options) -> Report:
        evaluated.append((run_dir, options))
        return Report(run_dir)

    import pzasync

    monkeypatch.setattr(pzasync, "evaluate", evaluate)
    merged = rows.merge(tmp_path, [0, 1], 10, 10007, "parallel", Path("docs/bench/out.json"), h2h_episodes=4,
                        cross_seeds=True)
    assert [(Path(run).parent.name, options["episodes"]) for run, options in evaluated] == [("parallel-1", 10)]
    assert json.loads((tmp_path / "eval-parallel-1.json").read_text())["episodes"] == 10
    (env,) = merged["envs"]
    assert env["short"] == "battle_v4" and env["score"] == "side return against random, mean of the sides"
    assert env["aec"]["scores"] == [0.5, -99.5] and env["parallel"]["scores"] == [-0.5, -100.5]
    assert env["parallel"]["agent_steps"] == [4000, 4001] and env["aec"]["seeds"] == [0, 1]
    assert env["random"] == -3000.0 and env["untrained"] == -400.0
    assert env["aec"]["curves"][0] == {"wall_s": [50.0], "side_return": [1.0]}
    assert env["aec"]["first_positive_s"] == [None, None]  # one episode: no 5-episode average yet
    curve = {"wall_s": [100, 200, 300, 500, 590, 600], "side_return": [-10, -5, 5, 20, 30, 40]}
    assert rows.curve_figures([curve], 10.0, window=2) == {"training_return_last_fifth": [30.0],
                                                          "first_positive_s": [500]}
    assert "--minutes 10 --seed $s --env-api $api" in merged["command"]
    assert merged["command"].endswith("out.json --episodes 10 --env-api parallel --seeds 0,1 --head-to-head 4 "
                                      "--cross-seeds")
    games = [(g["seed"], g["acting"], g["aec_side"], g["aec_return"], g["parallel_return"])
             for g in merged["head_to_head"]]
    assert games[:4] == [(0, "greedy", "red", 5.0, 9.0), (0, "greedy", "blue", 4.0, 10.0),
                         (0, "sampled", "red", 8.0, 12.0), (0, "sampled", "blue", 7.0, 13.0)]
    assert len(games) == 8 and games[4][:3] == (1, "greedy", "red") and games[4][3:] == (15.0, 19.0)
    cross = [(g["aec_seed"], g["parallel_seed"], g["aec_side"], g["aec_return"], g["parallel_return"])
             for g in merged["cross_seed_greedy"]]
    assert cross == [(0, 1, "red", 4.0, 108.0), (0, 1, "blue", 3.0, 109.0),
                     (1, 0, "red", 104.0, 8.0), (1, 0, "blue", 103.0, 9.0)]
    # each run's margin over its greedy games, same seed and across: parallel 0 plays (4, 6) and (-96, -94)
    summary = merged["greedy_summary"]
    assert summary["margins_by_run"] == {"aec": {0: -55.0, 1: 45.0}, "parallel": {0: -45.0, 1: 55.0}}
    assert (summary["same_seed_parallel_higher"], summary["same_seed_games"]) == (4, 4)
    assert summary["same_seed_sign_test_p"] == 0.0625 and rows.sign_test(5, 6) == 7 / 64
    assert (summary["cross_seed_parallel_higher"], summary["cross_seed_games"]) == (2, 4)
    assert summary["mean_margin"] == 5.0  # pairs (aec, parallel): (0, 0) 5, (0, 1) 105, (1, 0) -95, (1, 1) 5
    low, high = summary["mean_margin_ci95"]
    assert -95.0 <= low < 5.0 < high <= 105.0
    two = [{"wall_s": [10, 20, 70], "side_return": [1.0, 3.0, 5.0]}, {"wall_s": [40], "side_return": [8.0]}]
    mean = rows.binned_mean(two, [0.0, 30.0, 60.0, 90.0])  # bins: run 1 (2, -, 5), run 2 (-, 8, -)
    assert list(mean) == [2.0, 8.0, 5.0]


def test_the_env_api_table_pairs_each_seeds_paths_across_its_reports(results_page):
    """One row per env, its seeds gathered from every env_api report, each seed's two paths side by side."""
    table = results_page.env_api_table()
    seeds = {}
    for name in results_page.ENV_API_REPORTS:
        for env in results_page.report(name)["envs"]:
            assert env["aec"]["seeds"] == env["parallel"]["seeds"], (name, env["short"])
            seeds.setdefault(env["short"], []).extend(env["aec"]["seeds"])
    for short, env_seeds in seeds.items():
        (row,) = [line for line in table.splitlines() if line.startswith(f"| {short} |")]
        assert f"| {', '.join(str(s) for s in sorted(env_seeds))} |" in row
