"""The docs' results page is rendered from the committed runs, and cannot drift from them."""

import argparse
import json
import re
import shlex
import shutil
from pathlib import Path

import pytest

from dels_hub.bench.cli import add_bench_arguments
from dels_hub.bench.results_page import (
    HEADLINE_BEGIN,
    HEADLINE_END,
    NOT_FLAGS,
    add_report_arguments,
    bench_command,
    headline_table,
    render_page,
    report_main,
    run_folders,
)

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "results"
PAGE = ROOT / "docs" / "results.md"
README = ROOT / "README.md"


def report(*argv: str) -> int:
    return report_main(add_report_arguments(argparse.ArgumentParser()).parse_args(list(argv)))


def test_committed_page_equals_a_fresh_rendering():
    assert PAGE.read_text(encoding="utf-8") == render_page(RESULTS), (
        "docs/results.md is out of date: run `dels-hub report results --out docs/results.md`"
    )


def test_readme_headline_equals_a_fresh_rendering():
    readme = README.read_text(encoding="utf-8")
    table = readme.split(HEADLINE_BEGIN, 1)[1].split(HEADLINE_END, 1)[0]
    assert table == "\n" + headline_table(RESULTS), (
        "README.md's headline table is out of date: run `dels-hub report results --out docs/results.md --readme "
        "README.md`"
    )
    for link in re.findall(r"\]\((results/[^)]+)\)", table):
        assert (ROOT / link).is_file(), link


def test_the_readme_table_goes_stale_with_its_runs(tmp_path):
    """The negative control of the README check: a changed figure in a headline run makes --check fail."""
    results = tmp_path / "results"
    shutil.copytree(RESULTS, results, ignore=shutil.ignore_patterns("*.jsonl", "*.png"))
    page, readme = tmp_path / "results.md", tmp_path / "README.md"
    readme.write_text(f"# a README\n\n{HEADLINE_BEGIN}\n{HEADLINE_END}\n\nafter the table\n")
    assert report(str(results), "--out", str(page), "--readme", str(readme)) == 0
    assert readme.read_text().endswith(f"{HEADLINE_END}\n\nafter the table\n")
    assert report(str(results), "--out", str(page), "--readme", str(readme), "--check") == 0

    first = json.loads((results / "headline.json").read_text())[0]["run"]
    changed = json.loads((results / first / "results.json").read_text())
    dels_copy = next(row for row in changed["rows"] if row["name"].startswith("DeLS") and row["name"].endswith("+ copy"))
    dels_copy["speedup_vs_target_generate"]["paired_median"] += 1.0
    (results / first / "results.json").write_text(json.dumps(changed))
    assert report(str(results), "--out", str(page), "--readme", str(readme), "--check") == 1


def test_a_changed_results_file_makes_the_page_stale(tmp_path):
    """The negative control of the test above: editing one figure changes the page, and --check says so."""
    run = run_folders(RESULTS)[-1]
    copy = tmp_path / "results" / run.relative_to(RESULTS)
    copy.mkdir(parents=True)
    shutil.copy(run / "results.json", copy / "results.json")
    page = tmp_path / "results.md"
    assert report(str(tmp_path / "results"), "--out", str(page)) == 0
    assert report(str(tmp_path / "results"), "--out", str(page), "--check") == 0

    results = json.loads((copy / "results.json").read_text())
    row = next(row for row in results["rows"] if isinstance(row.get("tau"), dict))
    row["tau"]["mean"] += 0.5
    (copy / "results.json").write_text(json.dumps(results))
    assert report(str(tmp_path / "results"), "--out", str(page), "--check") == 1
    assert page.read_text() != render_page(tmp_path / "results")


def test_report_refuses_a_folder_without_runs(tmp_path, capsys):
    assert report(str(tmp_path), "--out", str(tmp_path / "page.md")) == 2
    assert str(tmp_path) in capsys.readouterr().err
    assert not (tmp_path / "page.md").exists()


@pytest.mark.parametrize("folder", run_folders(RESULTS), ids=lambda f: f.relative_to(RESULTS).as_posix())
def test_each_rendered_command_parses_back_to_the_recorded_settings(folder):
    results = json.loads((folder / "results.json").read_text(encoding="utf-8"))
    where = folder.relative_to(ROOT).as_posix()
    words = shlex.split(bench_command(results["settings"], where, torch_threads=1))
    assert words[:3] == ["OMP_NUM_THREADS=1", "dels-hub", "bench"]
    parsed = vars(add_bench_arguments(argparse.ArgumentParser()).parse_args(words[3:]))
    assert parsed["out"] == where
    for name, recorded in results["settings"].items():
        if name in (*NOT_FLAGS, "out") or name not in parsed:
            continue
        if name == "peers" and isinstance(recorded, bool):  # the Python API's every peer / no peer
            recorded = parsed["peers"] if recorded else []
        if name == "dflash" and isinstance(recorded, str):
            recorded = [recorded]
        assert parsed[name] == recorded, name


def test_report_refuses_a_readme_without_the_markers(tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text("# no markers here\n")
    assert report(str(RESULTS), "--out", str(tmp_path / "page.md"), "--readme", str(readme)) == 2
    assert HEADLINE_BEGIN in capsys.readouterr().err
    assert readme.read_text() == "# no markers here\n" and not (tmp_path / "page.md").exists()
