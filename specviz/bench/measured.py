"""Shipped measurements the Compare and Why-it-is-free pages read, so a class never waits.

* acceptance profiles (`assets/heads/<model>/<head>/tree_profile.json`, written by
  `python -m specviz.tuning profile`): greedy tau at every tree size for each head;
* the equal-tree recording (`assets/acceptance/equal_trees.json`, `scripts/record_acceptance.py`):
  every method's rounds at the size of EAGLE-1's paper tree;
* forward-cost curves measured on other machines (`assets/curves/*.json`): copies of the cost
  file `python -m specviz.tuning show` writes in the user cache ({"forward": {n: seconds}, "machine":
  {...}, "overhead": s, "draft.<method>": {...}}). None ships until one has been measured;
* batched benchmarks (`assets/results/batch_*.json`, `python -m specviz.bench --batch ...`):
  throughput and per-user speed against the batch size, per method, on a CPU or a GPU.

Only reading and light validation here; every number comes from a file written by a measurement.
"""

from __future__ import annotations

import json
from pathlib import Path

ASSETS = Path(__file__).resolve().parents[2] / "assets"
HEAD_OF = {"eagle1": "eagle1", "eagle2": "eagle1", "eagle3": "eagle3", "medusa": "medusa"}  # EAGLE-2 drafts with EAGLE-1's head
DEFAULT_MODEL = "smollm2-135m-instruct"


def _read(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def acceptance_profiles(model: str = DEFAULT_MODEL, methods=("eagle1", "eagle2", "eagle3", "medusa")) -> dict[str, dict]:
    """method -> its shipped acceptance profile (methods without one are left out)."""
    out = {}
    for m in methods:
        data = _read(ASSETS / "heads" / model / HEAD_OF[m] / "tree_profile.json")
        prof = data.get(m) if isinstance(data, dict) else None
        if isinstance(prof, dict) and isinstance(prof.get("tau"), list):
            out[m] = prof
    return out


def equal_tree_recording() -> dict | None:
    """The shipped recording of every method at one equal tree size, or None."""
    data = _read(ASSETS / "acceptance" / "equal_trees.json")
    return data if isinstance(data, dict) and isinstance(data.get("methods"), dict) else None


def shipped_curves() -> list[dict]:
    """Forward-cost curves measured on other machines (GPU first), each with a 'label' and 'file'."""
    folder = ASSETS / "curves"
    out = []
    for f in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        data = _read(f)
        if not isinstance(data, dict) or not isinstance(data.get("forward"), dict) or not data["forward"]:
            continue
        m = data.get("machine") or {}
        label = m.get("cuda") or m.get("cpu") or f.stem
        out.append(dict(data, label=str(label), file=f.name, gpu=bool(m.get("cuda"))))
    return sorted(out, key=lambda d: not d["gpu"])


def is_gpu_run(report: dict) -> bool:
    """Whether a benchmark ran on a GPU: its machine names a CUDA device or its settings asked for one."""
    m = report.get("machine") or {}
    device = str((report.get("settings") or {}).get("device") or "")
    if device:
        return device.startswith("cuda")
    return bool(m.get("cuda"))


def shipped_batch_results(folder: Path | None = None) -> list[dict]:
    """The shipped batched benchmarks that hold measurements (a non-empty `by_batch`), each with its
    'file' and 'gpu' added; CPU runs first, newest first within each."""
    folder = folder or ASSETS / "results"
    out = []
    for f in sorted(folder.glob("batch_*.json")) if folder.is_dir() else []:
        data = _read(f)
        by_batch = data.get("by_batch") if isinstance(data, dict) else None
        if not isinstance(by_batch, dict) or not by_batch or not all(isinstance(e, dict) and e for e in by_batch.values()):
            continue
        out.append(dict(data, file=f.name, gpu=is_gpu_run(data)))
    out.sort(key=lambda d: str(d.get("date", "")), reverse=True)
    return sorted(out, key=lambda d: d["gpu"])


def cached_costs(model) -> dict | None:
    """This machine's measured costs for `model` if `specviz.tuning` has cached them, else None
    (reading never triggers a measurement)."""
    from ..tuning import cost_file  # measured.py stays torch-free at import: the pages read benchmark JSON through it

    try:
        f = cost_file(model)
    except Exception:  # noqa: BLE001 - a half-built model or a moved helper: nothing cached
        return None
    data = _read(f) if f.is_file() else None
    return data if isinstance(data, dict) and isinstance(data.get("forward"), dict) else None


def measure_costs(target, methods) -> dict | None:
    """Measure (once; cached in the user cache) this machine's forward curve and each method's
    drafting cost with `specviz.tuning`, then return the cached costs."""
    from ..methods import tune  # torch-free at import, as above; the registry builds each drafter to measure it

    for m in methods:
        tune(m, target)
    return cached_costs(target.model)
