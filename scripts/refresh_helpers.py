"""Helpers of scripts/refresh_heads.sh: read back the settings each shipped artefact recorded about
itself, and merge a partial re-measurement into the shipped files.

Every artefact that depends on a head is re-made with the settings it was made with (so the
refreshed file differs only by what the new head changes); those settings live in the files
themselves (`settings` of a benchmark result, `prompts`/`max_new_tokens` of a tree profile, the
`command` of the equal-tree recording). The argument printers write one argument per line, for
`mapfile -t` in bash (no shell quoting to get wrong).

    python scripts/refresh_helpers.py methods HEADS              # the methods drafting with these head folders
    python scripts/refresh_helpers.py results-using METHODS      # assets/results/*.json that ran any of METHODS
    python scripts/refresh_helpers.py bench-args FILE [--quick]  # argv of `python -m specviz.bench` that made FILE
    python scripts/refresh_helpers.py profile-args METHOD [--quick]
    python scripts/refresh_helpers.py acceptance-args [--quick]
    python scripts/refresh_helpers.py lesson-keys METHODS        # the recorded lesson rounds made by METHODS
    python scripts/refresh_helpers.py merge-eval REPORT METHODS  # a `train eval --out` report -> eval_per_step/eval_tau.json
    python scripts/refresh_helpers.py forget-costs CACHE METHODS|all
    python scripts/refresh_helpers.py record-machine             # assets/lessons/machine.json alone
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the tree being refreshed (a temporary copy under --quick)
sys.path.insert(0, str(ROOT))

MODEL = "smollm2-135m-instruct"
HEADS = ROOT / "assets" / "heads" / MODEL
RESULTS = ROOT / "assets" / "results"
EQUAL_TREES = ROOT / "assets" / "acceptance" / "equal_trees.json"
# the shipped head folder each method drafts with (EAGLE-2 drafts with EAGLE-1's head; as
# specviz.methods' registry and specviz.bench.measured.HEAD_OF say)
HEAD_OF = {"eagle1": "eagle1", "eagle2": "eagle1", "eagle3": "eagle3", "medusa": "medusa", "sps": "sps"}
QUICK = {"limit": 1, "max_new_tokens": 8}  # the smallest run that still goes through every code path
QUICK_PROFILE = {"limit": 1, "max_new_tokens": 16}  # a profile needs a few positions past its 8-deep horizon


def methods_of_heads(heads: str) -> list[str]:
    """Every method whose drafts come from one of the comma-listed head folders."""
    want = set(heads.split(","))
    unknown = want - set(HEAD_OF.values())
    if unknown:
        raise SystemExit(f"unknown head(s) {sorted(unknown)}; shipped heads: {sorted(set(HEAD_OF.values()))}")
    return [m for m, h in HEAD_OF.items() if h in want]


def _methods(s: str) -> set[str]:
    return {m for m in s.split(",") if m}


def results_using(methods: str) -> list[Path]:
    want = _methods(methods)
    out = []
    for f in sorted(RESULTS.glob("*.json")):
        settings = json.loads(f.read_text()).get("settings", {})
        if want & _methods(settings.get("methods", "")):
            out.append(f)
    return out


def bench_args(path: Path, quick: bool) -> list[str]:
    """`python -m specviz.bench` arguments from a result's `settings` (argparse dest -> --flag)."""
    s = dict(json.loads(Path(path).read_text())["settings"])
    if quick:
        s.update(QUICK)
    args = []
    for k, v in s.items():
        if k == "out" or v is None or v is False:
            continue
        flag = "--" + k.replace("_", "-")
        args += [flag] if v is True else [flag, str(v)]
    return args


def profile_args(method: str, quick: bool) -> list[str]:
    """`python -m specviz.tuning profile` arguments the shipped profile of `method` was made with."""
    prof = json.loads((HEADS / HEAD_OF[method] / "tree_profile.json").read_text())[method]
    size = QUICK_PROFILE if quick else {"limit": prof["prompts"], "max_new_tokens": prof["max_new_tokens"]}
    return ["--methods", method, "--limit", str(size["limit"]), "--max-new-tokens", str(size["max_new_tokens"])]


def acceptance_args(quick: bool) -> list[str]:
    """scripts/record_acceptance.py arguments from the recording's own `command` (so the methods
    recorded now merge with the ones kept: the script merges only under the same command)."""
    cmd = shlex.split(json.loads(EQUAL_TREES.read_text())["command"])
    args = cmd[cmd.index("scripts/record_acceptance.py") + 1:]
    if quick:
        args = ["--limit", str(QUICK["limit"]), "--max-new-tokens", str(QUICK["max_new_tokens"])]
    return args


def lesson_keys(methods: str) -> list[str]:
    from specviz.teaching.lesson import SPECS

    return [s.key for s in SPECS if s.method in _methods(methods)]


def merge_eval(report: Path, methods: str) -> None:
    """Put the re-measured methods of a `python -m specviz.train eval --out REPORT` run into the
    shipped eval_per_step.json / eval_tau.json, keeping the other methods' entries; `dates` says
    when each entry was measured (the files' old top-level `date` applies to the ones kept)."""
    rep = json.loads(Path(report).read_text())
    want = _methods(methods)
    for name, key in (("eval_per_step.json", "per_step"), ("eval_tau.json", "tau")):
        if key not in rep:
            continue
        f = HEADS / name
        old = json.loads(f.read_text()) if f.is_file() else {"model": rep["model"], key: {}}
        dates = old.get("dates") or {}
        if key == "per_step":
            entries = old[key]
            for m, v in rep[key].items():
                if m in want:
                    entries[m] = v
            measured = set(rep[key]) & want
        else:
            measured = set()
            for src, by_method in rep[key].items():
                for m, v in by_method.items():
                    if m in want:
                        old[key].setdefault(src, {})[m] = v
                        measured.add(m)
            entries = {m: None for by in old[key].values() for m in by}
        for m in entries:
            dates.setdefault(m, old.get("date", "?"))
        for m in measured:
            dates[m] = rep["date"]
        old["date"], old["dates"] = rep["date"], dict(sorted(dates.items()))
        f.write_text(json.dumps(old, indent=1))
        print(f"{f}: {sorted(measured)} re-measured")


def forget_costs(cache: Path, methods: str) -> None:
    """Drop `draft.<method>` from every cached device-cost file: a new head may change the drafting
    cost (draft vocabulary, layers); the target's forward curve and the overhead stay cached.
    `all`: delete the files (everything is measured again when next needed)."""
    for f in sorted((Path(cache) / "tuning").glob("*.json")):
        data = json.loads(f.read_text())
        one = 1000 * float(data.get("forward", {}).get("1", "nan"))
        print(f"{f.name}: measured {data.get('date', '?')}, target forward of 1 token {one:.1f} ms")
        if methods == "all":
            f.unlink()
            print(f"{f.name}: deleted")
            continue
        gone = [k for k in list(data) if k.removeprefix("draft.") in _methods(methods) and k.startswith("draft.")]
        for k in gone:
            del data[k]
        if gone:
            f.write_text(json.dumps(data, indent=1))
            print(f"{f.name}: dropped {gone}")


def record_machine() -> None:
    """assets/lessons/machine.json without re-recording any round (`python -m specviz.teaching.lesson record`
    always records rounds: with --only empty it records all of them)."""
    import torch

    from specviz.teaching import lesson
    from specviz.core.target import load_target

    target = load_target(dtype=torch.float32, device="cpu")
    (lesson.LESSON_DIR / lesson.MACHINE_FILE).write_text(json.dumps(lesson.record_machine(target), indent=1))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cmd", choices=["methods", "lesson-keys", "results-using", "bench-args", "profile-args",
                                    "acceptance-args", "merge-eval", "forget-costs", "record-machine"])
    ap.add_argument("args", nargs="*")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args(argv)
    if a.cmd == "methods":  # head folders -> the methods drafting with them
        print(",".join(methods_of_heads(a.args[0])))
    elif a.cmd == "lesson-keys":
        print(",".join(lesson_keys(a.args[0])))
    elif a.cmd == "results-using":
        print("\n".join(str(f.relative_to(ROOT)) for f in results_using(a.args[0])))
    elif a.cmd == "bench-args":
        print("\n".join(bench_args(Path(a.args[0]), a.quick)))
    elif a.cmd == "profile-args":
        print("\n".join(profile_args(a.args[0], a.quick)))
    elif a.cmd == "acceptance-args":
        print("\n".join(acceptance_args(a.quick)))
    elif a.cmd == "merge-eval":
        merge_eval(Path(a.args[0]), a.args[1])
    elif a.cmd == "forget-costs":
        forget_costs(Path(a.args[0]), a.args[1])
    else:
        record_machine()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
