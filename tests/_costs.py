"""Fixture costs for the test run: pages under test read a fixed, once-measured cost table instead of
timing trees on first use (which took minutes, and longer than a page test's limit on a slow CPU).

`install(target, folder)` writes `tests/fixtures/tuning_costs.json` (the target's forward curve and
each tunable method's drafting and per-round costs, measured by `python -m specviz.tuning` on one
machine, named inside) as this machine's cost file in `folder`, marked `fixture` so the tuner never
re-times it, with each tunable method's pick made from the cost model's predictions (greedy and
T = 1 alike) instead of a timing run. The tuner itself is tested on its own (test_tuning.py), with
its own folders."""

from __future__ import annotations

import json
import os
from pathlib import Path

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "tuning_costs.json"


def predicted_pick(profile: dict, costs: dict, method: str, temperature: float) -> dict:
    """A pick as `tuning.pick._timed_pick` caches it, with the model's predictions standing in for the
    timed rates (each candidate counted as verifying its tree's tokens)."""
    from specviz import tuning
    from specviz.tuning.pick import TUNED_DRAFTING

    vanilla = 1.0 / (tuning.overhead_at(costs, method, 1) + tuning.interpolate(costs["forward"], 1))
    cands = [dict(c, measured_tok_s=c["tok_s"], measured_tau=c["tau"], measured_nodes=float(c["total_tokens"]),
                  speedup=c["tok_s"] / vanilla) for c in tuning.shortlist(tuning.rank_trees(profile, costs, method))]
    return dict(profile=tuning.profile_id(profile), drafting=TUNED_DRAFTING, candidates=cands, vanilla_tok_s=vanilla,
                prompts=tuning.SHORTLIST_PROMPTS, max_new_tokens=tuning.SHORTLIST_TOKENS, temperature=temperature)


def fixture_costs(target) -> dict:
    """The fixture table made current for `target`: this runtime's id, every tunable method's picks."""
    from specviz import methods, tuning
    from specviz.tuning.ranking import profile_dir

    table = json.loads(FIXTURE.read_text())
    data = {k: v for k, v in table.items() if not k.startswith("pick.")}
    data.update(version=tuning.COSTS_VERSION, runtime=tuning.runtime_id(target.model), fixture=str(FIXTURE.name))
    for m in methods.TUNABLE:
        folder = profile_dir(target.model.name, m)
        profile = tuning.load_profile(folder, m) if folder else None
        if profile is None or f"draft.{m}" not in data:
            continue
        data[f"pick.{m}"] = predicted_pick(profile, data, m, 0.0)
        data[f"pick.{m}.sampled"] = predicted_pick(profile, data, m, 1.0)
    return data


def install(target, folder: Path) -> list[Path]:
    """Write the fixture as `target`'s cost file in `folder` (what `$SPECVIZ_TUNING_DIR` names), under
    the name for every thread count from 1 to the CPU's: the app's server runs its sessions on fewer
    threads than the test process (specviz.serving.concurrency), and a cost file is per thread count."""
    import torch

    from specviz.runtime.machine import device_key

    text = json.dumps(fixture_costs(target), indent=1)
    Path(folder).mkdir(parents=True, exist_ok=True)
    now, out = torch.get_num_threads(), []
    try:
        for n in range(1, max(now, os.cpu_count() or 1) + 1):
            torch.set_num_threads(n)
            out.append(Path(folder) / f"{device_key(target.model)}.json")
            out[-1].write_text(text)
    finally:
        torch.set_num_threads(now)
    return out
