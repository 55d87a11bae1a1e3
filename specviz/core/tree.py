"""The draft tree: what a drafter proposes and the target verifies in one pass.

Node 0 is the root: the last committed token, not yet seen by the target. Every other node is
a drafted token whose parent comes earlier in the list (topological order), so the flattened
tree can be fed to the target as one block. A chain is the tree with one child per node.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch


class VocabRows:
    """Draft distributions [n, V] held as their nonzero columns: probs [n, Vd] over the target ids
    `ids` [Vd], every other column 0. EAGLE-3 drafts over 8,192 of the 49,152 tokens;
    a round used to scatter each row into a fresh 49k-wide tensor and take its top-k there (a few % of
    a CPU round), though a greedy round never reads a full row. `topk` works in
    the draft columns; `rows[r]` builds the full row when a rule or a picture needs it."""

    def __init__(self, probs: torch.Tensor, ids: torch.Tensor, vocab: int):
        self.probs, self.ids, self.vocab = probs, ids, int(vocab)

    def __len__(self) -> int:
        return self.probs.shape[0]

    def __getitem__(self, r: int) -> torch.Tensor:
        return self.probs.new_zeros(self.vocab).index_copy_(0, self.ids, self.probs[r])

    def topk(self, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(values, target ids) [n, k] of each row's k largest entries (zeros when a row has fewer)."""
        v, i = torch.topk(self.probs, min(k, self.probs.shape[1]), dim=-1)
        if k > v.shape[1]:  # a full row's missing entries are zeros (never drafted: q = 0)
            v = torch.cat([v, v.new_zeros(v.shape[0], k - v.shape[1])], dim=1)
            i = torch.cat([i, i.new_zeros(i.shape[0], k - i.shape[1])], dim=1)
        return v, self.ids[i]


class RowsOf(Mapping):
    """node -> its draft distribution, built on first use from (rows, index) and kept: a tree's
    `dists` without copying rows nobody reads."""

    def __init__(self, where: dict):
        self._where, self._done = where, {}

    def __getitem__(self, node):
        if node not in self._done:
            rows, r = self._where[node]
            self._done[node] = rows[r]
        return self._done[node]

    def __iter__(self):
        return iter(self._where)

    def __len__(self):
        return len(self._where)


class RankedRows:
    """Draft distributions (a tensor [n, V] or `VocabRows`) with each row's largest entries already
    found, values and target ids [n, k] (the drafting kernel finds them while the row is in cache)."""

    def __init__(self, rows, top_v: torch.Tensor, top_i: torch.Tensor):
        self.rows, self.top_v, self.top_i = rows, top_v, top_i

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, r: int) -> torch.Tensor:
        return self.rows[r]

    def topk(self, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        if k <= self.top_v.shape[1]:
            return self.top_v[:, :k], self.top_i[:, :k]
        return top_of(self.rows, k)

    @classmethod
    def gather(cls, parts: list[tuple["RankedRows", int]]) -> "RankedRows":
        """The rows (part, row) one under the other."""
        first = parts[0][0].rows
        if isinstance(first, VocabRows):
            rows = VocabRows(torch.stack([p.rows.probs[r] for p, r in parts]), first.ids, first.vocab)
        else:
            rows = torch.stack([p.rows[r] for p, r in parts])
        k = min(p.top_v.shape[1] for p, _ in parts)
        return cls(rows, torch.stack([p.top_v[r, :k] for p, r in parts]), torch.stack([p.top_i[r, :k] for p, r in parts]))


def top_of(dists, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """torch.topk over each row of a drafter's distributions (a tensor, `VocabRows` or `RankedRows`)."""
    if isinstance(dists, (VocabRows, RankedRows)):
        return dists.topk(k)
    return torch.topk(torch.as_tensor(dists), k, dim=-1)


@dataclass
class DraftTree:
    tokens: list[int]  # token id per node; tokens[0] is the root
    parents: list[int]  # parent index per node; -1 for the root
    q: list[float]  # draft probability of each node's token given its parent (root: 1.0)
    sampled: bool = False  # True when children were *drawn* from q (SpS/SpecInfer), else chosen
    # warped draft distribution over the vocabulary *after* each node (for its children), where
    # known. Needed for the sampled rule (min(1, p/q) and residual max(p - q, 0)) and for display.
    dists: Mapping[int, torch.Tensor] = field(default_factory=dict)
    scores: list[float] | None = None  # cumulative log q along the path (default: from q)
    # EAGLE-2 trees: every scored candidate (score, parent candidate, token), kept or not; a
    # smaller tree is the top of the same list, which is how `specviz.tuning` sizes trees
    candidates: list | None = None
    # the draft's *unprocessed* distribution after each node (only the raw-logit-q bug reads it)
    raw_dists: Mapping[int, torch.Tensor] = field(default_factory=dict)
    without_replacement: bool = False  # sampled children were drawn without replacement
    # nodes copied from the context by prompt lookup (a deterministic draft: q = 1), not drafted by a model
    copied: frozenset = frozenset()

    def __post_init__(self):
        n = len(self.tokens)
        if not (len(self.parents) == len(self.q) == n) or n == 0 or self.parents[0] != -1:
            raise ValueError("tree needs matching tokens/parents/q and a root at index 0")
        for i in range(1, n):
            if not 0 <= self.parents[i] < i:
                raise ValueError(f"node {i}: parent {self.parents[i]} must precede it")
        self.copied = frozenset(self.copied)
        if any(not 0 < i < n for i in self.copied):
            raise ValueError("only drafted nodes (not the root) can be copied ones")
        if self.scores is None:
            s = [0.0] * n
            for i in range(1, n):
                s[i] = s[self.parents[i]] + math.log(max(self.q[i], 1e-30))
            self.scores = s

    # -------------------------------------------------------------- structure
    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def depths(self) -> list[int]:
        d = [0] * len(self)
        for i in range(1, len(self)):
            d[i] = d[self.parents[i]] + 1
        return d

    def children(self, i: int) -> list[int]:
        """Children of node i in draft-rank order (the order they were added)."""
        return self.children_lists()[i]

    def children_lists(self) -> list[list[int]]:
        """Every node's children in draft-rank order: kids[i] lists node i's children."""
        kids: list[list[int]] = [[] for _ in range(len(self))]
        for i in range(1, len(self)):
            kids[self.parents[i]].append(i)
        return kids

    def likely_path(self, min_prob: float, max_nodes: int) -> list[int]:
        """The nodes below the root along the draft's likeliest children, while the path's
        probability (the product of q) stays >= min_prob, at most max_nodes of them."""
        kids, path, i, prob = self.children_lists(), [], 0, 1.0
        while len(path) < max_nodes and kids[i]:
            best = max(kids[i], key=lambda c: self.q[c])
            prob *= self.q[best]
            if prob < min_prob:
                break
            path.append(best)
            i = best
        return path

    def inner_nodes(self) -> list[int]:
        """Nodes with at least one child, in node order (their rows give p of every drafted token)."""
        return sorted(set(self.parents[1:]))

    @property
    def branching(self) -> bool:
        """Some node has more than one child (a tree, not a chain)."""
        return len(set(self.parents[1:])) < len(self) - 1

    @property
    def ranks(self) -> list[int]:
        r = [0] * len(self)
        seen: dict[int, int] = {}
        for i in range(1, len(self)):
            r[i] = seen.get(self.parents[i], 0)
            seen[self.parents[i]] = r[i] + 1
        return r

    def path(self, i: int) -> list[int]:
        """Node ids from the root to i, inclusive."""
        out = []
        while i != -1:
            out.append(i)
            i = self.parents[i]
        return out[::-1]

    def leaves(self) -> list[int]:
        has_child = set(self.parents[1:])
        return [i for i in range(len(self)) if i not in has_child]

    def root_to_leaf_paths(self) -> list[list[int]]:
        return [self.path(leaf) for leaf in self.leaves()]

    def attention_rows(self) -> list[list[bool]]:
        """The attention mask as lists: row i is True at i and at each of its ancestors."""
        rows: list[list[bool]] = []
        n = len(self)
        for i, p in enumerate(self.parents):
            row = rows[p].copy() if p >= 0 else [False] * n
            row[i] = True
            rows.append(row)
        return rows

    def level_rows(self, nodes: list[int], slot: dict, offset: int) -> list[list[bool]]:
        """The mask of one drafting level, the other tree-mask builder: `nodes` are written after
        `offset` tree entries already in the head's cache (node a at entry `slot[a]`); row r (entry
        offset + r) sees its ancestors' entries and itself. The root is no entry: it is the committed
        context, which every row sees anyway."""
        width = offset + len(nodes)
        rows = []
        for r, i in enumerate(nodes):
            row = [False] * width
            a = self.parents[i]
            while a > 0:
                row[slot[a]] = True
                a = self.parents[a]
            row[offset + r] = True
            rows.append(row)
        return rows

    def attention_mask(self) -> torch.Tensor:
        """[N, N] bool: node i may attend to node j iff j is i or one of its ancestors (built in
        Python and made a tensor once: a torch op per node costs more than the whole list work)."""
        return torch.tensor(self.attention_rows(), dtype=torch.bool)

    def position_list(self, prefix_len: int) -> list[int]:
        """Position of each node as ints: committed context length + depth."""
        return [prefix_len + d for d in self.depths]

    def position_ids(self, prefix_len: int) -> torch.Tensor:
        """Position of each node: committed context length + depth."""
        return torch.tensor(self.position_list(prefix_len), dtype=torch.long)

    @property
    def max_depth(self) -> int:
        return max(self.depths)

    def prune(self, max_depth: int) -> "DraftTree":
        """The tree without nodes deeper than `max_depth`: near the token budget they could never
        count, and the losslessness check never needs target rows past its horizon."""
        depths = self.depths
        if max(depths) <= max_depth:
            return self
        keep = [i for i in range(len(self)) if depths[i] <= max(max_depth, 0)]
        new = {old: k for k, old in enumerate(keep)}
        return DraftTree(
            tokens=[self.tokens[i] for i in keep],
            parents=[-1] + [new[self.parents[i]] for i in keep[1:]],
            q=[self.q[i] for i in keep],
            sampled=self.sampled,
            dists={new[i]: d for i, d in self.dists.items() if i in new},
            scores=[self.scores[i] for i in keep],
            raw_dists={new[i]: d for i, d in self.raw_dists.items() if i in new},
            without_replacement=self.without_replacement,
            copied=frozenset(new[i] for i in self.copied if i in new),
        )

    def with_chain(self, tokens) -> "DraftTree":
        """The tree with a copied chain of `tokens` from the root (prompt lookup's guess): the chain
        follows the children that already draft its tokens and goes on as new nodes (q = 1, a
        deterministic draft) where none does; verify tries a copied child as a one-hot draft under any
        rule, since it depends on the context alone. Returns the tree itself when the chain adds nothing."""
        tokens_, parents, q, scores = list(self.tokens), list(self.parents), list(self.q), list(self.scores)
        kids = self.children_lists()
        node, added = 0, []
        for t in tokens:
            t = int(t)
            nxt = next((c for c in kids[node] if tokens_[c] == t), None)
            if nxt is None:
                nxt = len(tokens_)
                tokens_.append(t), parents.append(node), q.append(1.0), scores.append(scores[node])
                kids.append([])
                kids[node].append(nxt)
                added.append(nxt)
            node = nxt
        if not added:
            return self
        return DraftTree(tokens=tokens_, parents=parents, q=q, sampled=self.sampled, dists=self.dists, scores=scores,
                         candidates=self.candidates, raw_dists=self.raw_dists,
                         without_replacement=self.without_replacement, copied=self.copied | frozenset(added))

    # -------------------------------------------------------------- construction
    @classmethod
    def chain(cls, root: int, tokens, q=None, dists=None, sampled=False, copied: bool = False) -> "DraftTree":
        """A chain of `tokens` under `root`; `copied`: every one of them copied from the context."""
        tokens = [int(t) for t in tokens]
        q = [1.0] * len(tokens) if q is None else [float(x) for x in q]
        return cls(
            tokens=[int(root)] + tokens,
            parents=[-1] + list(range(len(tokens))),
            q=[1.0] + q,
            sampled=sampled,
            dists=dict(dists or {}),
            copied=frozenset(range(1, len(tokens) + 1)) if copied else frozenset(),
        )
