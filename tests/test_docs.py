"""The README and docs/ stay readable: short, current, and free of run and issue numbers.

- the README's results table is exactly what `scripts/results_table.py` makes of assets/results/;
- the README has at most 200 lines;
- README.md and docs/*.md name no work session, issue or run-numbered yardstick ("session 23",
  "issue 14", "s23"): say what was measured, on what machine, on which date;
- every relative link in them points at a file that exists.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
spec = importlib.util.spec_from_file_location("results_table", ROOT / "scripts" / "results_table.py")
results_table = importlib.util.module_from_spec(spec)
spec.loader.exec_module(results_table)

# run and issue numbers; `--sessions 30` (the load test's flag) and "30 sessions" are not
RUN_NUMBERS = [
    re.compile(r"\bsession[- ]?\d+", re.I),  # session 23, session-21 head, Session 9
    re.compile(r"(?<!-)\bsessions \d+", re.I),  # sessions 20-21
    re.compile(r"\bsessions? #\d+", re.I),
    re.compile(r"\bissues?[- ]?#?\d+", re.I),  # issue 14, issue-14 yardstick, issue #14
    re.compile(r"\bs\d{2}\b", re.I),  # s22, s23: yardsticks named after a run
    re.compile(r"\bPR #?\d+", re.I),
]


def run_numbers(text: str) -> list[str]:
    """Every line of `text` that names a run or an issue by its number."""
    return [f"{i}: {line.strip()[:120]}" for i, line in enumerate(text.splitlines(), 1)
            if any(p.search(line) for p in RUN_NUMBERS)]


def test_readme_results_table_is_the_scripts_output():
    have = results_table.readme_block(README.read_text())
    assert have is not None, "README.md lacks the <!-- results:start --> / <!-- results:end --> markers"
    assert have == results_table.table(), "run `python scripts/results_table.py --write README.md`"


def test_results_table_reads_the_current_runs():
    runs = results_table.load_runs()
    current = results_table.current_benchmark(runs)
    assert current, "no greedy Spec-Bench run in assets/results/"
    name, run = current[0]
    greedy = [r for n, r in runs.items() if n.startswith("specbench_fp32_t0") and not r["settings"].get("temperature")]
    assert run["date"] == max(r["date"] for r in greedy)  # the newest, as the Compare page reads it
    table = results_table.table()
    for m in run["by_dtype"]["fp32"]["methods"].values():
        tau = "-" if m["tau"] is None else f"{m['tau']:.2f}"  # a peer (llama.cpp) has no rounds
        assert f"| {m['tokens_per_s']:.1f} | {tau} | {m['speedup_vs_vanilla']:.2f}x |" in table
    assert str(run["date"])[:10] in table


def test_check_and_write_on_a_copy(tmp_path):
    script = ROOT / "scripts" / "results_table.py"
    ok = subprocess.run([sys.executable, str(script), "--check", str(README)], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    copy = tmp_path / "README.md"
    shutil.copy(README, copy)
    copy.write_text(copy.read_text().replace("| EAGLE-3 |", "| EAGLE-3 (edited by hand) |", 1))
    bad = subprocess.run([sys.executable, str(script), "--check", str(copy)], capture_output=True, text=True)
    assert bad.returncode == 1 and "--write" in bad.stderr
    fixed = subprocess.run([sys.executable, str(script), "--write", str(copy)], capture_output=True, text=True)
    assert fixed.returncode == 0
    assert copy.read_text() == README.read_text()
    nomark = tmp_path / "plain.md"
    nomark.write_text("# no table here\n")
    assert subprocess.run([sys.executable, str(script), "--check", str(nomark)], capture_output=True).returncode == 2


def test_readme_is_short():
    n = len(README.read_text().splitlines())
    assert n <= 200, f"README.md has {n} lines; move detail to docs/"


def test_the_two_commands_stay_in_the_readme():
    text = README.read_text()
    assert "make app    # " in text and "make test   # " in text  # CI runs README's test command (.ci/run)


@pytest.mark.parametrize("planted", ["measured in session 23", "the Session-21 head", "heads of sessions 20-21",
                                     "issue 14's yardstick", "the issue-14 yardstick", "see issue #14",
                                     "the s23 run", "S22 and s21"])
def test_the_check_catches_a_planted_run_number(planted):
    assert run_numbers(f"A line.\nSomething {planted}, on a Zen 3 VM.\n"), planted


@pytest.mark.parametrize("fine", ["python -m specviz.serving.loadtest --sessions 30", "30 sessions pressing at once",
                                  "a 2-core Zen 3 VM on 3 Dec 2026", "specbench_fp32_t0_l20_zen3.json",
                                  "the issue's goal", "tokens/s 1.45x"])
def test_the_check_leaves_ordinary_text_alone(fine):
    assert not run_numbers(fine), fine


@pytest.mark.parametrize("path", [README, *DOCS], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_run_or_issue_numbers(path):
    found = run_numbers(path.read_text())
    assert not found, f"{path.name} names runs or issues by number (say what, where, when):\n" + "\n".join(found)


def anchors(md: Path) -> set[str]:
    """GitHub's heading anchors of a markdown file."""
    heads = re.findall(r"^#{1,6} (.+)$", md.read_text(), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}


@pytest.mark.parametrize("path", [README, *DOCS], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(path):
    text = path.read_text()
    targets = re.findall(r"\]\(([^)\s]+)\)", text) + re.findall(r'<img src="([^"]+)"', text)
    missing = []
    for t in targets:
        if re.match(r"[a-z]+:", t):
            continue
        file, _, anchor = t.partition("#")
        dest = (path.parent / file) if file else path
        if not dest.exists() or (anchor and dest.suffix == ".md" and anchor not in anchors(dest)):
            missing.append(t)
    assert not missing, f"{path.name}: links to missing files or headings: {missing}"


def test_docs_exist():
    names = {p.name for p in DOCS}
    assert {"teaching.md", "runtime.md", "tuning.md", "results-history.md"} <= names


def test_every_shipped_result_file_is_described():
    """assets/results/README.md says what command and conditions made each result file (a file the
    table does not name is a number nobody can reproduce), and names no file that is not there."""
    folder = ROOT / "assets" / "results"
    text = (folder / "README.md").read_text()
    named = set(re.findall(r"^\| `([^`]+\.json)` \|", text, re.M))
    shipped = {f.name for f in folder.glob("*.json")}
    assert shipped - named == set(), "describe these in assets/results/README.md"
    assert named - shipped == set(), "these are described but not shipped"
