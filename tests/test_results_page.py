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
