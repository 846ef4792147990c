"""``dels-hub report``: the docs' results page, rendered from the committed ``results/**/results.json``.

Figures copied by hand drift from the runs that produced them; this page cannot. Each run gets its settings in one
line, the ``dels-hub bench`` command that reproduces it (rebuilt from the settings it recorded, with the bench's own
argument parser) and a table of its rows. ``--check`` compares the page on disk with a fresh rendering, and the test
suite runs that comparison, so a results file that changes without its page fails the tests.
"""

import argparse
import json
import shlex
import sys
from pathlib import Path

from ..files import write_text_atomic
from .cli import add_bench_arguments
from .rows import GAINS

DEFAULT_RESULTS = "results"
DEFAULT_PAGE = "docs/results.md"
# The runs a README leads with, listed in the results folder: [{"run": FOLDER, "label": TEXT}, ...].
HEADLINE_FILE = "headline.json"
HEADLINE_BEGIN = "<!-- dels-hub report: headline begin -->"
HEADLINE_END = "<!-- dels-hub report: headline end -->"
# The headline's columns: the row of each run that a column shows, picked by the row's name.
HEADLINE_COLUMNS = {
    # the target alone through our loop: what its kernels give without speculation (``packed_weights.py``)
    "target, our loop": lambda name: name.startswith("target (loop"),
    "DFlash": lambda name: name.startswith("DFlash") and not name.endswith("+ copy"),
    "DeLS": lambda name: name.startswith("DeLS") and not name.endswith("+ copy"),
    "DeLS + copy": lambda name: name.startswith("DeLS") and name.endswith("+ copy"),
    # the demo's product: drafts from the head's most frequent tokens (runs with --draft-vocab)
    "DeLS + copy, vocab": lambda name: name.startswith("DeLS") and "+ copy, vocab" in name,
    "prompt lookup": lambda name: "prompt-lookup" in name,
}
# Settings that runs recorded before their option existed do not hold: what the bench did then, by option.
BEFORE_THE_OPTION = {"policies": ["fixed"], "draft_mode": "sampled"}
# Recorded settings that are not flags of `dels-hub bench`, or that the command does not need.
NOT_FLAGS = ("warmup", "progress", "tokenizer")


def run_folders(results: Path) -> list[Path]:
    """Every folder under ``results`` that holds a ``results.json``, in path order."""
    return sorted(path.parent for path in results.rglob("results.json"))


def bench_command(settings: dict, out: str, torch_threads: int | None) -> str:
    """The ``dels-hub bench`` command line that reproduces a run with these recorded ``settings`` into ``out``.

    Flags that equal the bench's defaults are left out. A setting that the run could not record, because its
    option did not exist yet, gets the value the bench then had (``BEFORE_THE_OPTION``).
    """
    parser = add_bench_arguments(argparse.ArgumentParser(prog="dels-hub bench"))
    recorded = dict(settings, out=out)
    for name, value in BEFORE_THE_OPTION.items():
        recorded.setdefault(name, value)
    if recorded["temperature"] == 0:
        recorded.pop("draft_mode")  # greedy runs draft the top token in either mode
    parts = [] if torch_threads is None else [f"OMP_NUM_THREADS={torch_threads}"]
    parts += ["dels-hub", "bench"]
    for action in parser._actions:  # argparse keeps no public list of a parser's options
        if (action.dest not in recorded or action.dest in NOT_FLAGS or not action.option_strings
                or isinstance(action, argparse._StoreConstAction)):  # --no-peers: written by _flag for --peers
            continue
        parts += _flag(action, recorded[action.dest])
    return " ".join(parts)


def _flag(action: argparse.Action, value) -> list[str]:
    flag = action.option_strings[0]
    if value is None or value == action.default or value is True and action.dest == "peers":
        return []  # peers=True: every peer, the command line's default
    if action.dest == "peers" and not value:
        return ["--no-peers"]
    if isinstance(action, argparse.BooleanOptionalAction):
        return [flag if value else "--no-" + flag[2:]]
    if isinstance(value, dict):
        return [flag, shlex.quote(json.dumps(value))]
    if isinstance(action, argparse._AppendAction):
        return [word for item in value for word in (flag, shlex.quote(str(item)))]
    if isinstance(value, list):
        return [flag, *(shlex.quote(str(item)) for item in value)]
    return [flag, shlex.quote(str(value))]


def _number(value, pattern: str) -> str:
    return "-" if value is None else pattern.format(value)


def _tau(tau) -> str:
    if isinstance(tau, dict):
        if tau.get("low") is None or tau["low"] == tau["high"]:
            return _number(tau.get("mean"), "{:.2f}")
        return f"{tau['mean']:.2f} [{tau['low']:.2f}, {tau['high']:.2f}]"
    return _number(tau, "{:.2f}")


def _greedy(row: dict, temperature: float) -> str:
    if temperature > 0:
        return "n/a (T > 0)"
    match = row.get("greedy_match")
    return "-" if match is None else "yes" if match else "**NO**"


def describe_run(run: dict) -> str:
    """One line: what was measured, on what, and whether every greedy row equalled the target's output."""
    settings, machine, versions = run["settings"], run["machine"], run["versions"]
    temperature = settings["temperature"]
    sampling = "greedy" if temperature == 0 else f"T={temperature}, top-p {settings['top_p']}"
    threads = machine.get("torch_threads")
    parts = [
        f"{settings['dataset']}, {len(run['prompts'])} prompts, {sampling}, {settings['max_new_tokens']} new tokens",
        f"block size {settings.get('block_size')}",
        f"batch size {settings['batch_size']}" if run.get("mode") == "batched" else None,
        f"{run['dtype']} on {run['device']}" + (f", {threads} thread(s)" if run["device"] == "cpu" else ""),
        f"torch {versions.get('torch')}, transformers {versions.get('transformers')}",
        f"{run['wall_seconds']:.0f} s",
    ]
    greedy = run.get("greedy_check")
    if greedy is not None:
        parts.append("every greedy row equals target.generate" if greedy["ok"]
                     else f"**greedy mismatch: {', '.join(greedy['mismatched_rows'])}**")
    return "; ".join(part for part in parts if part) + "."


def rows_table(run: dict) -> list[str]:
    """The run's rows: tau with its 95% interval, speed, and the speedups, paired per prompt where measured."""
    temperature = run["settings"]["temperature"]
    if run.get("mode") == "batched":
        lines = ["| row | tau | tokens/s | vs target.generate | greedy equal |", "|---|---|---|---|---|"]
        for row in run["rows"]:
            lines.append(f"| {row['name']} | {_tau(row.get('tau'))} | "
                         f"{_number(row.get('tokens_per_second'), '{:.1f}')} | "
                         f"{_number(row.get('speedup_vs_target_generate'), '{:.2f}x')} | "
                         f"{_greedy(row, temperature)} |")
        return lines
    lines = ["| row | tau [95% CI] | tokens/s | speedup (paired median) | vs target.generate | greedy equal |",
             "|---|---|---|---|---|---|"]
    for row in run["rows"]:
        paired = (row.get("speedup") or {}).get("paired_median")
        generate = (row.get("speedup_vs_target_generate") or {}).get("paired_median")
        lines.append(f"| {row['name']} | {_tau(row.get('tau'))} | "
                     f"{_number(row.get('tokens_per_second_median'), '{:.1f}')} | {_number(paired, '{:.2f}x')} | "
                     f"{_number(generate, '{:.2f}x')} | {_greedy(row, temperature)} |")
    return lines


def engine_table(engine: dict) -> list[str]:
    """vLLM's rows of a run with ``--engine``: tokens/s at concurrency 1 and 8, and tau."""
    lines = ["", "| vLLM row | tau | tokens/s (c=1) | tokens/s (c=8) | greedy equal |", "|---|---|---|---|---|"]
    for row in engine["rows"]:
        lines.append(f"| {row['name']} | {_tau(row.get('tau_c1'))} | "
                     f"{_number(row.get('tokens_per_second_c1'), '{:.1f}')} | "
                     f"{_number(row.get('tokens_per_second_c8'), '{:.1f}')} | "
                     f"{'yes' if row.get('greedy_equal') else '**NO**'} |")
    return lines


def gain_lines(run: dict) -> list[str]:
    """The paired gains that the bench measured (DeLS over DFlash, the copy expert, cost-aware over fixed...)."""
    lines = []
    for row in run["rows"]:
        for key in GAINS:
            gain = row.get(key)
            if not gain or gain["tau_difference"]["mean"] is None:
                continue
            diff = gain["tau_difference"]
            interval = f" [{diff['low']:+.3f}, {diff['high']:+.3f}]" if diff.get("low") is not None else ""
            relative = gain.get("tau_gain_relative")
            relative = "" if relative is None else f" ({100 * relative:+.1f}%)"
            lines.append(f"- {row['name']} over {gain['baseline']}: tau {diff['mean']:+.3f}{interval}{relative}")
    return [""] + lines if lines else []


def render_page(results: Path) -> str:
    """The results page: one section per group of runs (the first folder under ``results``'s model folder)."""
    results = Path(results)
    lines = [
        "# Results",
        "",
        "<!-- Generated by `dels-hub report`; edit the runs, not this page. -->",
        "",
        f"Every `dels-hub bench` run committed under `{results.name}/`, rendered from its `results.json` by "
        f"`dels-hub report {results.name} --out {DEFAULT_PAGE}`. The test suite renders it again and fails when a "
        "results file changed without this page.",
        "",
        "- **tau**: tokens committed per verify step, bonus token included; the mean of per-prompt means, with a 95% "
        "t-interval over prompts.",
        "- **speedup**: the median over prompts of the per-prompt ratio of time per output token of the target "
        "alone through the same loop to the row's. **vs target.generate**: the same against transformers' own "
        "`generate`.",
        "- **greedy equal**: at T = 0, every prompt's tokens equal `target.generate`'s.",
        "- **command**: rebuilt from the settings the run recorded; it writes to the folder the run is committed in. "
        "Runs recorded before `--policy` existed drafted every block, and before `--draft-mode` sampled their "
        "drafts at T > 0: their commands say so.",
        "- Each folder also holds `results.md` (the bench's full table), `samples.jsonl` and the acceptance plots.",
    ]
    group = None
    for folder in run_folders(results):
        run = json.loads((folder / "results.json").read_text(encoding="utf-8"))
        relative = folder.relative_to(results)
        heading = "/".join(relative.parts[:2])
        if heading != group:
            group = heading
            lines += ["", f"## {heading}"]
        where = (Path(results.name) / relative).as_posix()
        threads = run["machine"].get("torch_threads") if run["device"] == "cpu" else None
        lines += [
            "",
            f"### {relative.as_posix()}",
            "",
            describe_run(run),
            "",
            "```bash",
            bench_command(run["settings"], where, threads),
            "```",
            "",
            *rows_table(run),
        ]
        if run.get("engine"):
            lines += engine_table(run["engine"])
        lines += gain_lines(run)
    return "\n".join(lines) + "\n"


def headline_table(results: Path) -> str:
    """The README's table: for each run of ``headline.json``, each column's mean tau and its paired speed over
    ``target.generate``, linked to the run's full table."""
    results = Path(results)
    lines = ["| run | " + " | ".join(HEADLINE_COLUMNS) + " | greedy equal |",
             "|---" * (len(HEADLINE_COLUMNS) + 2) + "|"]
    for entry in json.loads((results / HEADLINE_FILE).read_text(encoding="utf-8")):
        run = json.loads((results / entry["run"] / "results.json").read_text(encoding="utf-8"))
        cells = []
        for picks in HEADLINE_COLUMNS.values():
            row = next((row for row in run["rows"] if picks(row["name"])), None)
            speed = row and (row.get("speedup_vs_target_generate") or {}).get("paired_median")
            tau = row and (row["tau"]["mean"] if isinstance(row["tau"], dict) else row["tau"])
            cells.append("-" if row is None else f"{_number(tau, '{:.2f}')} · {_number(speed, '{:.2f}x')}")
        greedy = run.get("greedy_check")
        equal = "n/a (T > 0)" if greedy is None else "yes" if greedy["ok"] else "**NO**"
        link = (Path(results.name) / entry["run"] / "results.md").as_posix()
        lines.append(f"| [{entry['label']}]({link}) | " + " | ".join(cells) + f" | {equal} |")
    return "\n".join(lines) + "\n"


def with_headline(readme: str, table: str) -> str:
    """``readme`` with the text between the headline markers replaced by ``table``."""
    if HEADLINE_BEGIN not in readme or HEADLINE_END not in readme:
        raise ValueError(f"no {HEADLINE_BEGIN} ... {HEADLINE_END} markers")
    head, rest = readme.split(HEADLINE_BEGIN, 1)
    tail = rest.split(HEADLINE_END, 1)[1]
    return f"{head}{HEADLINE_BEGIN}\n{table}{HEADLINE_END}{tail}"


# -- the subcommand ---------------------------------------------------------------------------------------------


def add_report_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("results", nargs="?", default=DEFAULT_RESULTS,
                        help=f"the folder of committed runs (default: {DEFAULT_RESULTS})")
    parser.add_argument("--out", default=DEFAULT_PAGE, help=f"the page to write (default: {DEFAULT_PAGE})")
    parser.add_argument("--readme", default=None, metavar="PATH",
                        help=f"also render the headline table (the runs of RESULTS/{HEADLINE_FILE}) between the "
                             "headline markers of this README")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 when the page (or the README's table) differs from a fresh "
                             "rendering")
    return parser


def report_main(args: argparse.Namespace) -> int:
    results = Path(args.results)
    if not results.is_dir() or not run_folders(results):
        print(f"dels-hub report: error: {str(results)!r} is not a folder that holds runs (results.json files)",
              file=sys.stderr)
        return 2
    pages = {Path(args.out): render_page(results)}
    if args.readme is not None:
        readme = Path(args.readme)
        text = readme.read_text(encoding="utf-8") if readme.is_file() else ""
        if not (results / HEADLINE_FILE).is_file() or HEADLINE_BEGIN not in text or HEADLINE_END not in text:
            print(f"dels-hub report: error: --readme needs {results / HEADLINE_FILE} and a README that holds the "
                  f"lines {HEADLINE_BEGIN} and {HEADLINE_END}; {str(readme)!r} does not", file=sys.stderr)
            return 2
        pages[readme] = with_headline(text, headline_table(results))
    if args.check:
        stale = [path for path, text in pages.items()
                 if not path.is_file() or path.read_text(encoding="utf-8") != text]
        if stale:
            print(f"dels-hub report: {', '.join(map(str, stale))} out of date with {results}/: run `dels-hub report "
                  f"{results} --out {args.out}" + (f" --readme {args.readme}`" if args.readme else "`"),
                  file=sys.stderr)
        return 1 if stale else 0
    for path, text in pages.items():
        write_text_atomic(path, text)
        print(f"wrote {path}")
    return 0
