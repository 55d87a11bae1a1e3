"""EAGLE-1 (static tree), EAGLE-2 (dynamic tree) and EAGLE-3 (fused features, draft vocabulary).

The head keeps its own KV cache. Entry j of that cache pairs the target's feature after token j
(EAGLE-1: final normed state; EAGLE-3: fc(low, mid, high)) with token j+1, at position j. Only
entries built from *real* target features are ever committed: the prompt's at `reset` (the head's
part of the prefill; with a `window`, only the last prompt tokens'), and at `propose` the entries
still missing (the tokens accepted last round, whose features the target has just computed, and
the new root) are appended and committed first; the tree's own entries (built on the head's predicted
states) are written after them, attend to the committed entries plus their own ancestors (tree
mask), and are discarded when the round ends. Rejected branches therefore never leak into the
cache, and accepted tokens are re-encoded with the target's true features next round, as in the
public EAGLE code.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from pathlib import Path

import torch

from .. import SpecVizError
from ..heads.eagle import Eagle3Head
from ..heads.io import load_head, shipped_head_dir
from ..heads.layers import HeadCache
from ..core.sampling import SamplingParams, warp_logits
from ..core.tree import DraftTree, RankedRows, VocabRows
from ..core.tree_build import (EAGLE1_TREE, build_dynamic_tree, build_sampled_tree, build_static_tree, log_floor,
                               tree_from_candidates, tree_width)
from .base import Drafter, TreePick, cut_vocabulary, default_draft_vocab
from .lookup import LookupBranch, lookup_options
from .shape import TreeShape


class EagleDrafter(Drafter):
    q_is_probability = True
    in_kernel = True  # draft a level (or the whole tree) in one kernel call where the kernel serves the round

    def __init__(self, head, model, name="eagle2", tree="dynamic", depth=5, top_k=8, total_tokens=32,
                 static_tree=None, min_prob=0.0, window=None, draw="top", draft_vocab=None, lookup=0, stop_ids=()):
        self.head = head
        self.model = model
        self.name = name
        # static: the paths (EAGLE-1); dynamic: min_prob keeps only paths at least this likely
        # (tree_build.build_dynamic_tree); at T > 0 draw "top" keeps EAGLE's top-k drafts (kept with
        # probability p(x)), "sample" draws them from q (kept with probability min(1, p/q): more often)
        if draw not in ("top", "sample"):
            raise ValueError(f"draw must be 'top' or 'sample', got {draw!r}")
        if tree == "static":
            if draw == "sample":
                raise ValueError("draw='sample' needs a dynamic tree (EAGLE-2/3)")
            self._shape = TreeShape.static(static_tree or EAGLE1_TREE)
        else:
            self._shape = TreeShape.dynamic(depth, top_k, total_tokens, min_prob, draw)
        self._sampled = None  # the shape drafted at T > 0, when the tuner timed one there
        self.is3 = isinstance(head, Eagle3Head)
        if hasattr(head, "fuse_for_drafting"):
            head.fuse_for_drafting()  # q/k/v and gate/up as one block matmul each (same bits)
        self.taps = tuple(model.cfg.eagle3_layers()) if self.is3 else ("final",)
        p = next(head.parameters())
        self.dtype, self.device = p.dtype, p.device
        # EAGLE-3 drafts over its head's own vocabulary; an EAGLE-1 head, given `draft_vocab` = n, over
        # the first n token ids (base.cut_vocabulary): its LM head is the target's, and a drafting level
        # read all of its rows for a few top-k tokens
        vocab = cut_vocabulary(draft_vocab, model.cfg.vocab_size)
        self.draft_vocab = None if self.is3 else vocab
        self.vocab_ids_cpu = None
        if self.is3:
            self.vocab_ids_cpu = head.target_ids().cpu()
        elif self.draft_vocab:
            self.vocab_ids_cpu = torch.arange(self.draft_vocab)
        self.cache = None
        # The head reads only the last `window` prompt tokens (None: all of them). Its prompt pass
        # is a real cost of every EAGLE run (~5M multiply-adds a token through the torch path), and
        # our heads were trained on short contexts (most <= 384 tokens + a 160-token answer): a shipped head's
        # config says how far it reads (`specviz.draft_window`). What is drafted may change; what is
        # accepted never.
        if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
            raise ValueError(f"window must be a whole number >= 1 or None, got {window!r}")
        self.window = window
        self.base = 0  # the first context token the head's cache holds
        self.branch = LookupBranch(lookup, stop_ids)  # prompt lookup's copied chain at T = 0 (drafters.lookup)
        self.lookup = self.branch.tokens

    # ------------------------------------------------------------------ state
    def _features(self, taps: dict, out: torch.Tensor | None = None) -> torch.Tensor:
        """[n, H] head-level features from the target taps of n processed tokens, written into `out`
        when given (EAGLE-3 on the kernel: its fc straight into `out`, the same bits as head.fuse)."""
        kernel = self.head.draft_kernel if self.is3 and out is not None else None
        if kernel is not None and kernel.fuse_taps([taps[k] for k in self.taps], out):
            return out
        with torch.no_grad():
            if self.is3:
                lo, mi, hi = (taps[k].to(self.device, self.dtype) for k in self.taps)
                new = self.head.fuse(lo, mi, hi)
            else:
                new = taps["final"].to(self.device, self.dtype)
        if out is None:
            return new
        out.copy_(new)
        return out

    def reset(self, context, taps):
        m = self.head.m
        # with a window, the head reads only the last `window` context tokens (see `window`)
        self.base = max(0, len(context) - self.window) if self.window else 0
        self.cache = HeadCache(1, m.n_kv_heads, max(256, len(context) - self.base + 256), m.head_dim, self.dtype,
                               self.device)
        self.tokens = list(context)  # tokens whose features are known (processed by the target)
        first = self._features({k: v[self.base :] for k, v in taps.items()}) if context else None
        n = 0 if first is None else first.shape[0]
        # feats[j - base] pairs with tokens[j + 1] (or the root); entries < base + cache.length are
        # committed. They live in a buffer that grows by doubling, so a round appends without copying.
        self._feat_buf = torch.empty(max(256, 2 * n), m.hidden_size, dtype=self.dtype, device=self.device)
        if n:
            self._feat_buf[:n] = first
        self._n_feats = n
        if n > 1:
            # The head's prompt pass belongs to the prefill, as in the EAGLE code: every entry
            # (feats[j], token j+1) the prompt already gives, for j in [base, len(context) - 1); the
            # last one pairs with the root, which `propose` gets. Done in the first round instead, it
            # made that round's drafting look ~100x dearer than the rest.
            with torch.no_grad():
                self._commit_entries(self.tokens[self.base + 1 :])

    def _commit_entries(self, next_tokens: list[int]) -> torch.Tensor:
        """Append and commit the head's entries (feats[j], next_tokens[j - L]) for j from the
        committed length L on, at positions j; returns the head's outputs [1, T, H]."""
        L, T = self.base + self.cache.length, len(next_tokens)
        toks = torch.tensor([next_tokens], device=self.device)
        pos = torch.arange(L, L + T, device=self.device)[None]
        out = self.head.forward_cached(toks, self.feats[L - self.base : L - self.base + T][None], pos, self.cache)
        self.cache.commit(list(range(T)))
        return out

    @property
    def feats(self) -> torch.Tensor:
        """[n - base, H] the features of the processed tokens from `base` on (a view of the buffer)."""
        return self._feat_buf[: self._n_feats]

    def commit(self, processed, taps):
        self.tokens.extend(int(t) for t in processed)
        rows = taps[self.taps[0]].shape[0]
        n, need = self._n_feats, self._n_feats + rows
        if need > self._feat_buf.shape[0]:
            buf = self._feat_buf.new_empty(max(need, 2 * self._feat_buf.shape[0]), self._feat_buf.shape[1])
            buf[:n] = self._feat_buf[:n]
            self._feat_buf = buf
        self._features(taps, out=self._feat_buf[n:need])
        self._n_feats = need

    def snapshot(self):
        return {"length": self.cache.length, "n": len(self.tokens)}

    def restore(self, snap):
        self.cache.truncate(snap["length"])
        del self.tokens[snap["n"] :]
        self._n_feats = snap["n"] - self.base

    def describe(self, params: SamplingParams = SamplingParams()) -> dict:
        d = super().describe(params)
        if self.draft_vocab:
            d["draft_vocab"] = self.draft_vocab
        return d | self.branch.describe(params)

    # ------------------------------------------------------------------ drafting
    def _dist(self, out, params: SamplingParams):
        """Draft distribution over the target vocabulary [n, V] from head outputs [n, H] (EAGLE-3:
        as `VocabRows`, its draft vocabulary's columns)."""
        logits = (self.head.logits(out, self.vocab_ids_cpu) if self.draft_vocab else self.head.logits(out)).float()
        if not params.greedy:
            logits = warp_logits(logits, params)
        q = logits.softmax(-1).cpu()
        if self.vocab_ids_cpu is not None:  # the draft vocabulary's columns; full rows only where read (tree.VocabRows)
            return VocabRows(q, self.vocab_ids_cpu, self.model.cfg.vocab_size)
        return q

    def propose(self, context, root, params, generator):
        return self.branch.graft(self._draft(root, params, generator), context, root, params)

    @torch.no_grad()
    def _draft(self, root, params, generator) -> DraftTree:
        """The head's tree."""
        if self.cache is None:
            raise SpecVizError("The drafter needs reset() before propose().")
        n = len(self.tokens)
        if n == 0:  # a one-token prompt: nothing to condition on
            return DraftTree(tokens=[int(root)], parents=[-1], q=[1.0])
        L = self.base + self.cache.length
        kernel = self.head.draft_kernel_for(self.draft_vocab)
        if self.in_kernel and kernel is not None and kernel.serves(params) and kernel.usable(n - L, self.cache):
            return self._propose_in_kernel(kernel, root, params, generator)
        # 1. commit the entries built from real features: (feats[j], token j+1) for j in [L, n)
        root_out = self._commit_entries(self.tokens[L + 1 :] + [int(root)])[0, -1]
        # 2. grow the tree; node i's entry (hidden = parent's output, token i) at position n-1+depth
        outs = {0: root_out}
        slot = {}  # node -> index among the uncommitted tree entries
        order = []

        def expand(tree: DraftTree, nodes):
            need = [i for i in nodes if i not in outs]
            if need:
                depths = tree.depths
                off = len(order)
                block = torch.tensor(tree.level_rows(need, slot, off), dtype=torch.bool)  # lists, one tensor
                hid = torch.stack([self.step_feature(outs, tree.parents[i]) for i in need])[None]
                tk = torch.tensor([[tree.tokens[i] for i in need]], device=self.device)
                ps = torch.tensor([[n - 1 + depths[i] for i in need]], device=self.device)
                o = self.head.forward_cached(tk, hid, ps, self.cache, block=block, first=False, offset=off)
                for r, i in enumerate(need):
                    outs[i] = o[0, r]
                    slot[i] = off + r
                    order.append(i)
            return self._dist(torch.stack([outs[i] for i in nodes]), params)

        return self._grow(root, expand, params, generator)

    def step_feature(self, outs: dict, parent: int) -> torch.Tensor:
        """The feature a draft step reads beside its token: the head's own output at the parent node
        (at the root: the output of the target's last real feature). specviz.mistakes overrides it."""
        return outs[parent]

    def _grow(self, root, expand, params, generator) -> DraftTree:
        """The tree of this round's shape, grown level by level with `expand` (tree, nodes) -> dists."""
        s = self.shape_at(params)
        if s.kind == "static":
            return build_static_tree(int(root), [list(p) for p in s.paths], expand)
        # the top-k children per node and the way drafts are picked stay the drafter's (a tuned T > 0
        # shape was timed with them)
        top_k = self._shape.top_k
        if self._draws(params):
            return build_sampled_tree(int(root), expand, s.depth, top_k, s.total_tokens, generator, min_prob=s.min_prob)
        return build_dynamic_tree(int(root), expand, s.depth, top_k, s.total_tokens, min_prob=s.min_prob)

    def _draws(self, params: SamplingParams) -> bool:
        """Whether this round's drafts are drawn from q (draw="sample" at T > 0) rather than chosen."""
        return self._shape.draw == "sample" and not params.greedy

    def whole_tree_in_kernel(self, params: SamplingParams) -> bool:
        """Whether the kernel drafts a round's whole tree in one call (`DraftKernel.tree`): a dynamic tree
        whose drafts are chosen, not drawn; else one call per level."""
        return self.shape_at(params).kind == "dynamic" and not self._draws(params)

    def _propose_in_kernel(self, kernel, root, params, generator):
        """`propose` with each tree level one kernel call (heads.draft_kernel): the same entries,
        positions and masks as the torch path, the distributions' top-k found in the kernel."""
        n, H = len(self.tokens), self.head.m.hidden_size
        L = self.base + self.cache.length
        temperature = 0.0 if params.greedy else float(params.temperature)
        s = self.shape_at(params)
        top_k = self._shape.top_k if s.kind == "dynamic" else 1 + max((max(p) for p in s.paths if p), default=0)
        ids, V = self.vocab_ids_cpu, self.model.cfg.vocab_size
        wrap = None if ids is None else (lambda probs: VocabRows(probs, ids, V))

        def ranked(probs, top_v, top_i):
            return RankedRows(wrap(probs) if wrap else probs, top_v, top_i)

        # 1. commit the entries built from real features (feats[j], token j+1) for j in [L, n), and the root's
        nxt = self.tokens[L + 1 :] + [int(root)]
        T = len(nxt)
        row0, size = self.feats.data_ptr() + (L - self.base) * H * 4, H * 4
        if self.whole_tree_in_kernel(params):
            # the commit and every level in one call, grown in C++ as build_dynamic_tree grows them; the
            # kept tree is chosen from the candidates here, by the same code
            floor = log_floor(s.min_prob)
            cand, (probs, top_v, top_i), row_of = kernel.tree(
                nxt, [row0 + j * size for j in range(T)], list(range(L, L + T)), self.cache, int(root), n - 1,
                temperature, top_k, tree_width(top_k, s.total_tokens), s.depth, floor)
            self.cache.commit(list(range(T)))
            level = ranked(probs, top_v, top_i)
            return tree_from_candidates(int(root), cand, {c: (level, r) for c, r in row_of.items()}, s.total_tokens,
                                        floor)
        out, *dist = kernel.level(nxt, [row0 + j * size for j in range(T)], list(range(L, L + T)), self.cache, 0, None,
                                  1, temperature, top_k)
        self.cache.commit(list(range(T)))
        outs = {0: out[T - 1]}
        where = {0: (ranked(*dist), 0)}  # node -> (its level's distributions, its row)
        slot, order = {}, []

        def expand(tree: DraftTree, nodes):
            need = [i for i in nodes if i not in outs]
            if need:
                T, off, depths, parents = len(need), len(order), tree.depths, tree.parents
                mask = bytes(x for row in tree.level_rows(need, slot, off) for x in row)  # row-major, 0/1 bytes
                o, *d = kernel.level([tree.tokens[i] for i in need], [outs[parents[i]].data_ptr() for i in need],
                                     [n - 1 + depths[i] for i in need], self.cache, off, mask, T, temperature,
                                     top_k)
                level = ranked(*d)
                for r, i in enumerate(need):
                    outs[i], slot[i], where[i] = o[r], off + r, (level, r)
                    order.append(i)
            parts = [where[i] for i in nodes]
            level = parts[0][0]
            if len(level) == len(nodes) and all(p is level and r == j for j, (p, r) in enumerate(parts)):
                return level
            return RankedRows.gather(parts)

        return self._grow(root, expand, params, generator)


_HEADS: OrderedDict = OrderedDict()  # (model id, folder, files' stamps) -> (model, head)
_HEADS_LOCK = threading.Lock()


def _stamp(folder: Path) -> tuple:
    """The folder's files with their sizes and times: a head retrained in place is loaded again."""
    return tuple(sorted((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in folder.iterdir() if f.is_file()))


def shared_head(target, method: str, head_dir=None):
    """The head in `head_dir` (default: the shipped one) bound to the target. Loaded once per
    target and folder state and shared by every drafter: a head's weights are read-only, its
    per-sequence state lives in the drafter (a Start or a Compare run built it anew each time:
    docs/runtime.md, "Measured reasons behind code choices")."""
    model = target.model if hasattr(target, "model") else target
    folder = Path(head_dir) if head_dir else shipped_head_dir(model.name, method)
    if not (folder / "config.json").is_file():
        raise SpecVizError(
            f"No {method} head for {model.name} (looked in {folder}). Train one with "
            f"`python -m specviz.train {method}` and pass its folder."
        )
    key = (id(model), str(folder.resolve()), _stamp(folder))
    with _HEADS_LOCK:
        hit = _HEADS.get(key)
        if hit is not None and hit[0] is model:
            _HEADS.move_to_end(key)
            return hit[1], model, folder
    head = load_head(folder, target=model, dtype=model.dtype)
    with _HEADS_LOCK:
        _HEADS[key] = (model, head)
        while len(_HEADS) > 8:
            _HEADS.popitem(last=False)
    return head, model, folder


def draft_window(head, window: int | None = None) -> int | None:
    """How many prompt tokens the head reads: `window` when given (0: all of them), else its config's
    `specviz.draft_window` (our shipped heads), else all (an official EAGLE head, trained on long contexts)."""
    if window is not None:
        return int(window) or None
    w = (head.config.get("specviz") or {}).get("draft_window")
    return int(w) if w else None


def _with_pick(d: EagleDrafter, pick: TreePick | None) -> EagleDrafter:
    """A drafter given the tuner's pick: its greedy shape was built in; the shape timed at T = 1 serves
    every T > 0, and the pick is kept for `describe_tree`."""
    if pick:
        d.reshape(d.shape, pick.sampled_for(d.shape))
        d.tuning = pick
    return d


def make_eagle1(target, head_dir=None, static_tree=None, pick: TreePick | None = None, window=None, draft_vocab=None,
                lookup=None):
    """EAGLE-1's static tree: `static_tree` paths, the device-tuned `pick` (the registry asks
    `specviz.tuning`), or the paper's tree. `draft_vocab`: see `base.default_draft_vocab`; `lookup`:
    `base.default_lookup`."""
    head, model, folder = shared_head(target, "eagle1", head_dir)
    d = EagleDrafter(head, model, name="eagle1", tree="static", static_tree=pick.greedy.paths if pick else static_tree,
                     window=draft_window(head, window), draft_vocab=default_draft_vocab(draft_vocab, pick),
                     **lookup_options(target, lookup, pick))
    return _with_pick(d, pick)


def _make_dynamic(target, name, head_method, head_dir, depth, top_k, total_tokens, pick, paper_depth, min_prob,
                  window=None, draw=None, draft_vocab=None, lookup=None):
    head, model, folder = shared_head(target, head_method, head_dir)
    if pick:
        g = pick.greedy
        depth, total_tokens, top_k, min_prob = g.depth, g.total_tokens, g.top_k, g.min_prob
    draw = draw or (pick.draw if pick else "top")
    d = EagleDrafter(head, model, name=name, tree="dynamic", depth=depth or paper_depth, top_k=top_k,
                     total_tokens=total_tokens or 24, min_prob=min_prob or 0.0, window=draft_window(head, window),
                     draw=draw, draft_vocab=draft_vocab, **lookup_options(target, lookup, pick))
    return _with_pick(d, pick)


def make_eagle2(target, head_dir=None, depth=None, top_k=8, total_tokens=None, pick: TreePick | None = None,
                min_prob=None, window=None, draw=None, draft_vocab=None, lookup=None):
    """EAGLE-2: the EAGLE-1 head with a dynamic tree (`pick` from the registry, else the papers'
    CPU-scaled default of depth 5, 24 nodes; `min_prob`: see tree_build.build_dynamic_tree; `draw`: at T > 0,
    "sample" draws the drafts from q, tree_build.build_sampled_tree; `draft_vocab`: see `base.default_draft_vocab`;
    `lookup`: `base.default_lookup`)."""
    return _make_dynamic(target, "eagle2", "eagle1", head_dir, depth, top_k, total_tokens, pick, 5, min_prob, window,
                         draw, default_draft_vocab(draft_vocab, pick), lookup)


def make_eagle3(target, head_dir=None, depth=None, top_k=8, total_tokens=None, pick: TreePick | None = None,
                min_prob=None, window=None, draw=None, lookup=None):
    """EAGLE-3: its own head with a dynamic tree (as for EAGLE-2; paper default depth 6)."""
    return _make_dynamic(target, "eagle3", "eagle3", head_dir, depth, top_k, total_tokens, pick, 6, min_prob, window,
                         draw, lookup=lookup)
