"""Training-time test: the EAGLE-3 head trained on its own unrolled outputs, and the mask it trains with.

Step 1 runs over the whole sequence on the target's fused features; step j > 1 runs at every index
again, now on the head's own output of step j - 1 (what drafting will feed it). In attention a
query of step j at index t sees the context (step-1 keys at indices <= t) and, of the later steps,
only its own index t (`heads.layers.Attention.attend_ttt`).
"""
from __future__ import annotations

import json
from pathlib import Path


def ttt_mask(T: int, steps: int) -> list[list[int]]:
    """[(step j, index t)] x [(step i, index s)] -> 1 where the query may attend; rows and columns in
    step-major order (step 1's T entries first)."""
    def sees(j, t, i, s):
        return (i == 0 and s <= t) or (1 <= i <= j and s == t)

    cells = [(j, t) for j in range(steps) for t in range(T)]
    return [[int(sees(j, t, i, s)) for (i, s) in cells] for (j, t) in cells]


def per_step(path: Path) -> dict:
    """The shipped heads' held-out accuracy by draft step (`assets/heads/.../eval_per_step.json`):
    {method: {"acc": [...], "chain": [...], "tau_chain": x, ...}}."""
    return json.loads(Path(path).read_text())["per_step"]
