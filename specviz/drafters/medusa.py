"""Medusa: K residual heads on the target's last hidden state, drafting a static tree.

Head i predicts the token i + 2 positions after the last processed token (the target itself
supplies the next one, the root). The heads see only that one state, not the drafted tokens, so a
node at depth d takes its ranked children from head d's distribution whoever its parent is (the
Cartesian-product tree of Medusa, pruned to a sparse static shape).
"""

from __future__ import annotations

from pathlib import Path

import torch

from .. import SpecVizError
from ..heads.io import load_head, shipped_head_dir
from ..sampling import warp_logits
from ..tree import EAGLE1_TREE, DraftTree, build_static_tree
from .base import Drafter
from .shape import TreeShape


def default_medusa_tree(n_heads: int) -> list[list[int]]:
    return [p for p in EAGLE1_TREE if len(p) <= n_heads]


class MedusaDrafter(Drafter):
    name = "medusa"
    taps = ("final",)
    sampled = False
    q_is_probability = True

    def __init__(self, heads, model, tree=None):
        self.heads, self.model = heads, model
        self._shape = TreeShape.static(tree or default_medusa_tree(heads.n_heads))
        self._sampled = None  # the tree drafted at T > 0, when the tuner timed one there
        self.last = None

    def reset(self, context, taps):
        self.last = taps["final"][-1] if context else None

    def commit(self, processed, taps):
        self.last = taps["final"][-1]

    def snapshot(self):
        return {"last": None if self.last is None else self.last.clone()}

    def restore(self, snap):
        self.last = snap["last"]

    @torch.no_grad()
    def propose(self, context, root, params, generator):
        if self.last is None:
            return DraftTree(tokens=[int(root)], parents=[-1], q=[1.0])
        p = next(self.heads.parameters())
        logits = self.heads.logits(self.heads(self.last.to(p.device, p.dtype))).float()  # [K, V]
        if not params.greedy:
            logits = warp_logits(logits, params)
        dists = logits.softmax(-1).cpu()

        def expand(tree: DraftTree, nodes):
            d = tree.depths
            return torch.stack([dists[d[i]] for i in nodes])

        return build_static_tree(int(root), [list(p) for p in self.shape_at(params).paths], expand)


def make_drafter(target, head_dir=None, tree=None, tuned: dict | None = None):
    """Medusa's static tree: `tree` paths, the device-tuned `tuned["paths"]` (the registry asks
    `specviz.tuning`), or the default sparse tree."""
    model = target.model if hasattr(target, "model") else target
    folder = Path(head_dir) if head_dir else shipped_head_dir(model.name, "medusa")
    if not (folder / "config.json").is_file():
        raise SpecVizError(f"No Medusa heads for {model.name} (looked in {folder}); train them with "
                           "`python -m specviz.train medusa`.")
    heads = load_head(folder, target=model, dtype=model.dtype)
    d = MedusaDrafter(heads, model, tree=tuned["paths"] if tuned else tree)
    if tuned:
        d.reshape(d.shape, TreeShape.static(tuned["sampled"]["paths"]) if tuned.get("sampled") else None)
        d.tuning = tuned
    return d
