"""Plain records of one speculative round: the only thing the app's pages read.

Everything is built from lists, ints, floats and strings so a trace can be exported as JSON,
compared byte for byte between sessions, and rendered without touching the engine.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

TopList = list  # list of [token_id, token_text, probability]


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
        its deep copy (5 ms for a 24-node round, paid by every step of a classroom server)."""
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
