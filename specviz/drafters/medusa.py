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
from ..runtime import qkernel
from ..heads.draft_kernel import DraftKernel
from ..heads.io import load_head, shipped_head_dir
from ..core.sampling import SamplingParams, warp_logits
from ..core.tree import DraftTree, RankedRows, VocabRows
from ..core.tree_build import EAGLE1_TREE, build_static_tree
from .base import Drafter, TreePick, cut_vocabulary, default_draft_vocab
from .lookup import LookupBranch, lookup_options
from .shape import TreeShape


def default_medusa_tree(n_heads: int) -> list[list[int]]:
    return [p for p in EAGLE1_TREE if len(p) <= n_heads]


class MedusaDrafter(Drafter):
    name = "medusa"
    taps = ("final",)
    q_is_probability = True

    def __init__(self, heads, model, tree=None, draft_vocab=None, lookup=0, stop_ids=()):
        self.heads, self.model = heads, model
        # as an EAGLE-1 head's: the heads' distributions over the first `draft_vocab` ids only (base.cut_vocabulary)
        self.draft_vocab = cut_vocabulary(draft_vocab, model.cfg.vocab_size)
        self.vocab_ids_cpu = None if self.draft_vocab is None else torch.arange(self.draft_vocab)
        self._shape = TreeShape.static(tree or default_medusa_tree(heads.n_heads))
        self._sampled = None  # the tree drafted at T > 0, when the tuner timed one there
        self.last = None
        self.branch = LookupBranch(lookup, stop_ids)  # prompt lookup's copied chain at T = 0 (drafters.lookup)
        self.lookup = self.branch.tokens

    def describe(self, params: SamplingParams = SamplingParams()) -> dict:
        d = super().describe(params)
        if self.draft_vocab:
            d["draft_vocab"] = self.draft_vocab
        return d | self.branch.describe(params)

    def reset(self, context, taps):
        self.last = taps["final"][-1] if context else None

    def commit(self, processed, taps):
        self.last = taps["final"][-1]

    def snapshot(self):
        return {"last": None if self.last is None else self.last.clone()}

    def restore(self, snap):
        self.last = snap["last"]

    def propose(self, context, root, params, generator):
        return self.branch.graft(self._draft(root, params), context, root, params)

    @torch.no_grad()
    def _draft(self, root, params) -> DraftTree:
        """The heads' tree."""
        if self.last is None:
            return DraftTree(tokens=[int(root)], parents=[-1], q=[1.0])
        p = next(self.heads.parameters())
        paths = [list(p) for p in self.shape_at(params).paths]
        depth = max((len(p) for p in paths), default=1)  # head d drafts depth d + 1: deeper heads are not read
        logits = self.heads.logits(self.heads(self.last.to(p.device, p.dtype), depth), vocab=self.draft_vocab).float()
        lib = qkernel.loaded()
        if lib is not None and logits.device.type == "cpu" and logits.is_contiguous() and DraftKernel.serves(params):
            # softmax and each head's top-k in one kernel call (the torch ops cost more than the heads)
            dists = _softmax_top(lib, logits, 0.0 if params.greedy else float(params.temperature),
                                 1 + max((max(p) for p in paths if p), default=0))
            probs = dists.rows
        else:
            if not params.greedy:
                logits = warp_logits(logits, params)
            dists = probs = logits.softmax(-1).cpu()
        ids, V = self.vocab_ids_cpu, self.model.cfg.vocab_size

        def expand(tree: DraftTree, nodes):
            d = tree.depths
            rows = [d[i] for i in nodes]
            picked = probs[rows] if ids is None else VocabRows(probs[rows], ids, V)  # a cut vocabulary's ids are 0..n-1
            if isinstance(dists, RankedRows):
                return RankedRows(picked, dists.top_v[rows], dists.top_i[rows])
            return picked

        return build_static_tree(int(root), paths, expand)


def _softmax_top(lib, logits: torch.Tensor, temperature: float, k: int) -> RankedRows:
    """Logits [K, V] as distributions with their top-k, computed in place by the kernel."""
    R, N = logits.shape
    top_v, top_i = torch.empty(R, k), torch.empty(R, k, dtype=torch.long)
    lib.softmax_top_rows(logits.data_ptr(), R, N, temperature, k, None, top_v.data_ptr(), top_i.data_ptr(),
                         torch.get_num_threads())
    return RankedRows(logits, top_v, top_i)


def make_drafter(target, head_dir=None, tree=None, pick: TreePick | None = None, draft_vocab=None, lookup=None):
    """Medusa's static tree: `tree` paths, the device-tuned `pick` (the registry asks
    `specviz.tuning`), or the default sparse tree. `draft_vocab`: see `base.default_draft_vocab`; `lookup`:
    `base.default_lookup`."""
    model = target.model if hasattr(target, "model") else target
    folder = Path(head_dir) if head_dir else shipped_head_dir(model.name, "medusa")
    if not (folder / "config.json").is_file():
        raise SpecVizError(f"No Medusa heads for {model.name} (looked in {folder}); train them with "
                           "`python -m specviz.train medusa`.")
    heads = load_head(folder, target=model, dtype=model.dtype)
    d = MedusaDrafter(heads, model, tree=pick.greedy.paths if pick else tree, draft_vocab=default_draft_vocab(draft_vocab, pick),
                      **lookup_options(target, lookup, pick))
    if pick:
        d.reshape(d.shape, pick.sampled_for(d.shape))
        d.tuning = pick
    return d
