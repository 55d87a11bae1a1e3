"""Growing a draft tree level by level: EAGLE-1's static tree, EAGLE-2's dynamic expansion and rerank,
and drafts drawn from q. Each builder calls `expand(tree, nodes)` for the draft distributions of a
level's nodes and returns a :class:`specviz.core.tree.DraftTree`.
"""

from __future__ import annotations

import heapq
import math

import torch

from .sampling import sample
from .tree import DraftTree, RankedRows, RowsOf, VocabRows, top_of

# EAGLE-1's static tree (25 nodes + root, depth 5) as root-relative child-rank paths.
EAGLE1_TREE: list[list[int]] = [
    [0], [1], [2], [3], [0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [2, 0], [2, 1], [3, 0],
    [0, 0, 0], [0, 0, 1], [0, 0, 2], [0, 1, 0], [0, 1, 1], [0, 2, 0], [0, 2, 1], [1, 0, 0],
    [0, 0, 0, 0], [0, 0, 0, 1], [0, 0, 0, 2], [0, 0, 0, 0, 0], [0, 0, 0, 0, 1],
]  # fmt: skip


def static_tree_shape(rank_paths: list[list[int]]) -> list[tuple[int, int]]:
    """(parent index, child rank) per non-root node, ordered by depth then path, from rank paths.

    The result says: node k+1 is the `rank`-th most likely child of node `parent`.
    """
    paths = sorted((tuple(p) for p in rank_paths), key=lambda p: (len(p), p))
    index = {(): 0}
    shape = []
    for p in paths:
        if p[:-1] not in index:
            raise ValueError(f"rank path {list(p)} has no parent path in the tree")
        index[p] = len(index)
        shape.append((index[p[:-1]], p[-1]))
    return shape


def build_static_tree(root: int, rank_paths, expand) -> DraftTree:
    """Grow a static tree level by level.

    `expand(tree_so_far, node_ids)` returns the warped draft distributions [len(node_ids), V]
    after those nodes (one batched drafter call per level); children take the ranked tokens.
    """
    shape = static_tree_shape(rank_paths)
    tree = DraftTree(tokens=[int(root)], parents=[-1], q=[1.0])
    depth = [0]
    for parent, _ in shape:
        depth.append(depth[parent] + 1)
    for level in range(max(depth)):
        now = [(k, p, r) for k, (p, r) in enumerate(shape, start=1) if depth[k] == level + 1]
        parents = sorted({p for _, p, _ in now})
        dists = expand(tree, parents)
        row_of = {p: row for row, p in enumerate(parents)}
        for row, p in enumerate(parents):
            tree.dists[p] = dists[row]
        top_v, top_i = top_of(dists, 1 + max(rank for _, _, rank in now))  # one top-k for the level
        top_v, top_i = top_v.tolist(), top_i.tolist()
        for k, p, rank in now:  # k == len(tree): shape is ordered by depth
            tree = _append(tree, p, int(top_i[row_of[p]][rank]), float(top_v[row_of[p]][rank]))
    return tree


def tree_width(top_k: int, total_tokens: int) -> int:
    """How many children a node of a dynamic tree may get and how many nodes a level expands: `top_k`,
    but no more than the tree's `total_tokens - 1` drafts (see `build_dynamic_tree`)."""
    return min(top_k, max(1, total_tokens - 1))


def log_floor(min_prob: float) -> float:
    """The path-probability floor `min_prob` as a floor on a node's score (its log); 0: none."""
    return math.log(min_prob) if min_prob > 0 else -math.inf


def build_dynamic_tree(root: int, expand, depth: int, top_k: int, total_tokens: int, prune: bool = True,
                       min_prob: float = 0.0) -> DraftTree:
    """EAGLE-2's dynamic tree.

    Each step expands the top_k frontier nodes; every child is scored by its cumulative
    log-probability; the best top_k children form the next frontier, but all candidates are
    remembered. After `depth` steps the best `total_tokens - 1` candidates are kept (a node's
    score never exceeds its parent's, so parents always survive with their children).
    `expand(tree, node_ids)` returns warped draft distributions [len(node_ids), V].

    A tree smaller than top_k + 1 nodes expands only its best `total_tokens - 1` frontier nodes
    and children (`width`): a frontier node ranked lower has that many candidates of its own depth
    scoring at least as high, and so do all its descendants, so none of them could be kept (up to
    exact ties in score). The kept tree is the same; drafting a 3-node tree expands 2 nodes, not 8.
    `prune=False` expands all top_k (the tests compare the two).

    `min_prob` > 0 makes the tree as large as the drafter is sure: only candidates whose path
    probability (the product of q along the path, exp(score)) is at least `min_prob` are expanded
    or kept, and drafting stops at the first level where none is. A calibrated head accepts a
    node about as often as its path probability, so a node is worth verifying when that beats the
    cost of one more tree token relative to a whole pass (`specviz.tuning` picks the value); an
    unsure round verifies the root alone, as vanilla decoding does. 0 keeps EAGLE-2's fixed size.
    """
    width = tree_width(top_k, total_tokens) if prune else top_k
    floor = log_floor(min_prob)
    # candidates: (score, parent candidate id, token, q); candidate 0 is the root
    cand = [(0.0, -1, int(root), 1.0)]
    cand_dist: dict[int, tuple] = {}  # candidate -> (its level's rows, its row): built only if read
    tree = DraftTree(tokens=[int(root)], parents=[-1], q=[1.0])
    tree_of_cand = {0: 0}  # candidate id -> node index in the growing expansion tree
    frontier = [0]
    for _ in range(depth):
        nodes = [tree_of_cand[c] for c in frontier]
        dists = expand(tree, nodes)
        # one top-k over the whole frontier (each row's result is that row's own top-k)
        top_v, top_i = top_of(dists, width)
        top_v, top_i = top_v.tolist(), top_i.tolist()
        scored = []
        for row, c in enumerate(frontier):
            cand_dist[c] = (dists, row)
            for prob, tok in zip(top_v[row], top_i[row]):
                if prob <= 0:
                    continue
                scored.append((cand[c][0] + math.log(prob), c, int(tok), float(prob)))
        if not scored:
            break
        new_ids = []
        for s in scored:
            cand.append(s)
            new_ids.append(len(cand) - 1)
        best = [i for i in heapq.nlargest(width, new_ids, key=lambda i: cand[i][0]) if cand[i][0] >= floor]
        if not best:
            break  # no candidate at this depth is likely enough: its descendants are less so
        # the expansion tree holds only nodes we may expand further (the drafter runs on it)
        for cid in sorted(best):
            tree = _append(tree, tree_of_cand[cand[cid][1]], cand[cid][2], cand[cid][3])
            tree_of_cand[cid] = len(tree) - 1
        frontier = sorted(best)
    return tree_from_candidates(root, cand, cand_dist, total_tokens, floor)


def kept_candidates(cand: list, total_tokens: int, floor: float = -math.inf) -> list[int]:
    """Which scored candidates (score, parent candidate, ...) a dynamic tree of `total_tokens` keeps:
    the best `total_tokens - 1` at least `floor`, closed under parents (EAGLE-2's rerank)."""
    sure = (i for i in range(1, len(cand)) if cand[i][0] >= floor)
    keep = heapq.nlargest(total_tokens - 1, sure, key=lambda i: (cand[i][0], -i))
    return _close_under_parents(sorted(keep), cand)


def tree_from_candidates(root: int, cand: list, cand_dist: dict, total_tokens: int, floor: float) -> DraftTree:
    """The dynamic tree kept from its scored candidates (score, parent candidate, token, q), candidate 0
    the root: the best `total_tokens - 1` at least `floor` (log), closed under parents, parents first and
    siblings in rank order. `cand_dist`: candidate -> (its level's rows, its row), for the kept nodes'
    `dists`. Shared by `build_dynamic_tree` and the drafting kernel's whole-tree call, which grows the
    same candidates in C++."""
    keep = kept_candidates(cand, total_tokens, floor)
    # order by depth then score so parents come first and siblings are in rank order
    depth_of = {0: 0}
    for i in sorted(keep):
        depth_of[i] = depth_of[cand[i][1]] + 1
    order = sorted(keep, key=lambda i: (depth_of[i], cand[i][1], -cand[i][3], i))
    out = DraftTree(tokens=[int(root)], parents=[-1], q=[1.0])
    out.scores = [0.0]
    node_of = {0: 0}
    for i in order:
        out.tokens.append(cand[i][2])
        out.parents.append(node_of[cand[i][1]])
        out.q.append(cand[i][3])
        out.scores.append(cand[i][0])
        node_of[i] = len(out.tokens) - 1
    out.dists = RowsOf({node_of[c]: d for c, d in cand_dist.items() if c in node_of})
    out.candidates = [(c[0], c[1], c[2]) for c in cand]
    return out


def build_sampled_tree(root: int, expand, depth: int, top_k: int, total_tokens: int, generator,
                       min_prob: float = 0.0) -> DraftTree:
    """A dynamic tree whose children are *drawn* from q (T > 0), so the sampled rule verifies it.

    Why: with deterministic drafts (EAGLE-2's top-k) the target keeps a draft x with probability
    p(x), which at temperature 1 is small even when the head is right about p (a flat p gives every
    token little mass); a draft drawn from q is kept with probability min(1, p/q), on average
    sum_x min(p(x), q(x)) - e.g. 0.17 -> 0.29 per first token for the shipped EAGLE-3 head on
    Spec-Bench dev at T = 1. The same acceptance walk (specviz.core.verify, SpecInfer's
    rule without replacement) keeps the output exactly the target's, provided every choice of
    *which* children a node gets is made before they are drawn: each expanded node draws its
    children in one go without replacement, all of them are kept, and siblings stay in draw order
    (the walk tries them in that order). Which nodes are expanded may depend on their own path
    probability (they are in the tree already): level by level, the `top_k` likeliest nodes of the
    frontier whose path probability is at least `min_prob` each draw up to `top_k` children,
    until `total_tokens - 1` drafts are drawn or `depth` levels are grown. With `min_prob` a node
    draws only as many children as it has tokens whose path probability would reach the floor
    (a count read from q before drawing, so still fixed in advance): a greedy floored tree keeps
    exactly those candidates, and without the cap a floored depth-1 tree drew 8 children every
    round at T = 1 (a 9-token pass, measured well below vanilla's speed on Spec-Bench dev).
    """
    width = tree_width(top_k, total_tokens)
    floor = log_floor(min_prob)
    tree = DraftTree(tokens=[int(root)], parents=[-1], q=[1.0], sampled=True, without_replacement=True)
    where = {}  # node -> (its level's distributions, its row): the full rows are built only where read
    budget, frontier = total_tokens - 1, [0]
    for _ in range(depth):
        frontier = [i for i in sorted(frontier, key=lambda i: (-tree.scores[i], i))[:width] if tree.scores[i] >= floor]
        if budget <= 0 or not frontier:
            break
        dists = expand(tree, frontier)
        # at most `width` draws a node, so only each q's `width` largest entries are counted (the
        # drafting kernel has them already: top_of reads them from RankedRows)
        tops = top_of(dists, width)[0]
        nxt = []
        for row, node in enumerate(frontier):
            where[node] = (dists, row)
            q, ids = _draft_columns(dists, row)
            top = tops[row]
            k = min(width, budget, int((top > 0).sum()))
            if min_prob > 0:  # as many draws as q has children likely enough (decided from q, before any draw)
                k = min(k, int((top >= math.exp(floor - tree.scores[node])).sum()))
            if k <= 0:
                continue
            rest = q
            for j in range(k):  # k draws without replacement: one at a time, each drawn token removed
                c = sample(rest, generator)  # inverse CDF: ~10x cheaper than torch.multinomial on 49k tokens
                tree = _append(tree, node, c if ids is None else int(ids[c]), float(q[c]))
                nxt.append(len(tree) - 1)
                if j + 1 < k:
                    rest = rest.clone() if j == 0 else rest
                    rest[c] = 0
            budget -= k
        frontier = nxt
    tree.dists = RowsOf(where)
    return tree


def _draft_columns(dists, r: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Row r of a drafter's distributions as (q, the target ids of its columns), ids None for a full
    row. A draft vocabulary's row stays in its own columns (EAGLE-3: 8,192 of 49,152): the draw, the
    counts and q of the drawn token need no 49k-wide row, and the draw is the same, since the columns'
    ids ascend and the full row's other entries are zeros, which leave the inverse CDF unchanged."""
    rows = dists.rows if isinstance(dists, RankedRows) else dists
    if isinstance(rows, VocabRows):
        return rows.probs[r], rows.ids
    return torch.as_tensor(rows[r]), None


def _close_under_parents(keep: list[int], cand) -> list[int]:
    """Ties in scores could drop a parent; add any missing ancestor."""
    ks = set(keep)
    for i in list(keep):
        p = cand[i][1]
        while p > 0 and p not in ks:
            ks.add(p)
            p = cand[p][1]
    return sorted(ks)


def _append(tree: DraftTree, parent: int, token: int, q: float) -> DraftTree:
    tree.tokens.append(int(token))
    tree.parents.append(int(parent))
    tree.q.append(float(q))
    tree.scores.append(tree.scores[parent] + math.log(max(q, 1e-30)))
    return tree
