"""Plain records of one speculative round: the only thing the app's pages read.

Everything is built from lists, ints, floats and strings so a trace can be exported as JSON,
compared byte for byte between sessions, and rendered without touching the engine.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace

import torch

TopList = list  # list of [token_id, token_text, probability]
TOP_N = 8  # entries kept in each top list of a trace


@dataclass
class NodeTrace:
    id: int  # index in the flattened tree; 0 is the root (the last committed token)
    parent: int  # -1 for the root
    depth: int  # 0 for the root
    token: int
    text: str
    q: float | None  # draft probability of this token given its parent (warped); None for root
    p: float | None  # target probability of this token given its parent's path (warped)
    score: float  # cumulative draft log-probability of the path to this node
    rank: int  # rank among its siblings (0 = the draft's top choice)
    position: int  # position id used in the verify pass
    status: str = "untried"  # root | accepted | rejected | untried
    next_q_top: TopList = field(default_factory=list)  # draft's top next tokens after this node
    next_p_top: TopList = field(default_factory=list)  # target's top next tokens after this node
    next_p_raw_top: TopList = field(default_factory=list)  # same, unwarped softmax (greedy rounds)
    copied: bool = False  # copied from the context by prompt lookup (q = 1: a deterministic draft), not a model's


@dataclass
class AcceptStep:
    depth: int  # depth of the tried node
    node: int  # tried node id
    token: int
    text: str
    p: float  # target probability of the token under the current (residual) distribution
    q: float  # draft probability used by the rule
    ratio: float | None  # p / q (None when q = 0 or greedy)
    u: float | None  # the uniform draw; None for greedy
    accepted: bool
    residual_top: TopList = field(default_factory=list)  # target residual after a rejection


@dataclass
class RoundTrace:
    round_index: int
    method: str
    rule: str  # greedy | chain | tree-deterministic | tree-sampled
    sampling: dict
    prefix_len: int
    nodes: list[NodeTrace]
    tree_mask: list[list[int]]  # N x N, 1 where row node may attend to column node
    position_ids: list[int]
    steps: list[AcceptStep]
    accepted_nodes: list[int]  # node ids of the accepted path, root excluded
    extra_token: int  # the token the target adds: bonus or correction
    extra_text: str
    extra_source: str  # bonus | resampled | greedy-correction | vanilla
    extra_top: TopList  # top of the distribution the extra token came from
    committed: list[int]  # tokens appended this round (accepted drafts + extra)
    committed_text: list[str]
    draft_time_s: float
    verify_time_s: float
    total_time_s: float
    finished: bool = False
    rng_state_before: list[int] | None = None  # replay: generator state at round start

    @property
    def accept_length(self) -> int:
        """Tokens this round added (accepted drafts + 1): the per-round tau."""
        return len(self.committed)

    def to_dict(self) -> dict:
        """The trace as plain dicts and lists, keys in field order: `dataclasses.asdict` without
        its deep copy (a cost paid by every step of a classroom server)."""
        d = dict(vars(self))
        d["nodes"] = [dict(vars(n)) for n in self.nodes]
        d["steps"] = [dict(vars(s)) for s in self.steps]
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False)

    def render_texts(self, token_text) -> "RoundTrace":
        """Fill every token's text with `token_text(id)` (the engine records ids and probabilities
        only; texts are a tokenizer's business). In place; returns the trace."""
        def tops(lst):
            return [[t, token_text(t), x] for t, _, x in lst]

        for n in self.nodes:
            n.text = token_text(n.token)
            n.next_q_top, n.next_p_top, n.next_p_raw_top = tops(n.next_q_top), tops(n.next_p_top), tops(n.next_p_raw_top)
        for s in self.steps:
            s.text, s.residual_top = token_text(s.token), tops(s.residual_top)
        self.extra_text, self.extra_top = token_text(self.extra_token), tops(self.extra_top)
        self.committed_text = [token_text(t) for t in self.committed]
        return self

    @classmethod
    def from_dict(cls, d: dict) -> "RoundTrace":
        d = dict(d)
        d["nodes"] = [NodeTrace(**n) for n in d["nodes"]]
        d["steps"] = [AcceptStep(**s) for s in d["steps"]]
        return cls(**d)


# ---------------------------------------------------------------------------- building one
def top_lists(dists: torch.Tensor) -> list[TopList]:
    """The TOP_N likeliest entries of every row of a [N, V] matrix, with one topk for all rows (one call
    per node cost ~4% of a classroom server's CPU); each row's entries equal a one-row call's."""
    v, i = torch.topk(dists.float(), min(TOP_N, dists.shape[-1]), dim=-1)
    return [[[t, "", x] for t, x in zip(ti, vi) if x > 0] for ti, vi in zip(i.tolist(), v.tolist())]


def _top(dist: torch.Tensor | None, detail: bool) -> TopList:
    return top_lists(dist[None])[0] if dist is not None and detail else []


def record_round(tree, res, committed: list[int], *, round_index: int, method: str, sampling, L: int, target_rows,
                 detail: bool, times: tuple, finished: bool, rng_state, positions, rows) -> RoundTrace:
    """What one round did, as a plain record, from what the engine computed: the drafter's `tree`, the
    walk's result `res` (specviz.core.verify.VerifyResult), the `committed` tokens, the lazy target rows.
    Token ids and probabilities only (texts empty: the engine renders them for a detailed round).
    `times`: (start, drafted, pass started, verified) perf-counter readings. A plain (not `detail`)
    round keeps no top lists, mask or RNG state."""
    t_start, t_draft, t_pass, t_verify = times
    accepted = set(res.accepted)
    tried = {s.node for s in res.steps}
    depths, ranks, parents, tokens = tree.depths, tree.ranks, tree.parents, tree.tokens
    n = len(tree)
    # p of every drafted token under its parent's row (a detailed trace computed every inner row; a
    # plain one has p only where the walk went)
    computed = target_rows.computed()
    known = set(computed)
    kids = [i for i in range(1, n) if parents[i] in known]
    p_tok = [None] * n
    for i, v in zip(kids, target_rows.gather([parents[i] for i in kids], [tokens[i] for i in kids])):
        p_tok[i] = v
    greedy_raw = sampling.greedy and target_rows.raw is not None
    # the target's top next tokens after each node whose row was computed (not after leaves the walk
    # never reached: nothing of this round depends on them)
    done = computed if detail else []
    p_tops = [[]] * n
    raw_tops = [[]] * n
    if done:
        for i, top in zip(done, top_lists(target_rows.matrix(done))):
            p_tops[i] = top
        if greedy_raw:
            for i, top in zip(done, top_lists(target_rows.matrix(done, "raw"))):
                raw_tops[i] = top
    q_tops = {}
    if detail and tree.dists:
        q_ids = sorted(tree.dists)
        shapes = {tuple(tree.dists[i].shape) for i in q_ids}
        if len(shapes) == 1:
            q_tops = dict(zip(q_ids, top_lists(torch.stack([tree.dists[i] for i in q_ids]))))
        else:
            q_tops = {i: _top(tree.dists[i], detail) for i in q_ids}
    nodes = []
    for i in range(n):
        status = "root" if i == 0 else "accepted" if i in accepted else "rejected" if i in tried else "untried"
        nodes.append(NodeTrace(
            id=i, parent=parents[i], depth=depths[i], token=tokens[i], text="",
            q=None if i == 0 else float(tree.q[i]), p=p_tok[i], score=float(tree.scores[i]), rank=ranks[i],
            position=L + depths[i], status=status, next_q_top=q_tops.get(i, []), next_p_top=p_tops[i],
            next_p_raw_top=raw_tops[i], copied=i in tree.copied,
        ))
    steps = [replace(s, text="", residual_top=_top(res.residuals.get(s.node), detail)) for s in res.steps]
    mask = [[int(b) for b in row] for row in rows] if detail else []
    return RoundTrace(
        round_index=round_index,
        method=method,
        rule=res.rule,
        sampling=sampling.as_dict(),
        prefix_len=L,
        nodes=nodes,
        tree_mask=mask,
        position_ids=list(positions),
        steps=steps,
        accepted_nodes=list(res.accepted),
        extra_token=int(res.extra_token),
        extra_text="",
        extra_source=res.extra_source,
        extra_top=_top(res.extra_dist, detail),
        committed=list(committed),
        committed_text=[""] * len(committed),
        draft_time_s=t_draft - t_start,
        verify_time_s=t_verify - t_pass,
        total_time_s=(t_draft - t_start) + (time.perf_counter() - t_pass),
        finished=finished,
        rng_state_before=rng_state.tolist() if detail else None,
    )
