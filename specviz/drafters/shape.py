"""A draft tree's shape as one value: what a drafter exposes, what the tuner picks, what pages show.

Two kinds of tree are drafted: a *static* one (EAGLE-1, Medusa: the same paths every round, given
as child-index paths from the root) and a *dynamic* one (EAGLE-2/3: `depth` levels, `top_k`
children per expanded node, `total_tokens` nodes kept, root included; `min_prob` a floor on a
path's probability; `draw` "top" keeps the top-k drafts, "sample" draws them from q at T > 0).
A drafter without a tree to shape (vanilla, PLD, SpS) has no shape. A shape that cannot be drafted
raises ValueError (as a drafter refusing its settings does; the app shows the message).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True)
class TreeShape:
    kind: str  # "static" or "dynamic"
    paths: tuple = ()  # static: child-index paths, e.g. ((0,), (1,), (0, 0))
    depth: int = 0
    top_k: int = 0
    total_tokens: int = 0
    min_prob: float = 0.0
    draw: str = "top"

    def __post_init__(self):
        if self.kind not in ("static", "dynamic"):
            raise ValueError(f"A tree is static or dynamic, not {self.kind!r}.")
        if self.kind == "static":
            object.__setattr__(self, "paths", tuple(tuple(int(i) for i in p) for p in self.paths))
            object.__setattr__(self, "total_tokens", len(self.paths) + 1)
        else:
            if self.depth < 1 or self.top_k < 1 or self.total_tokens < 1:
                raise ValueError(f"A dynamic tree needs depth, top_k and total_tokens >= 1, got {self}.")
            if not 0.0 <= self.min_prob < 1.0:
                raise ValueError(f"min_prob must be in [0, 1), got {self.min_prob}.")
        if self.draw not in ("top", "sample"):
            raise ValueError(f"draw must be 'top' or 'sample', got {self.draw!r}.")
        if self.draw == "sample" and self.kind != "dynamic":
            raise ValueError("Drafts drawn from q need a dynamic tree (EAGLE-2/3).")

    @classmethod
    def static(cls, paths) -> "TreeShape":
        return cls("static", paths=tuple(paths))

    @classmethod
    def dynamic(cls, depth: int, top_k: int, total_tokens: int, min_prob: float = 0.0, draw: str = "top") -> "TreeShape":
        return cls("dynamic", depth=int(depth), top_k=int(top_k), total_tokens=int(total_tokens),
                   min_prob=float(min_prob), draw=draw)

    def replace(self, **changes) -> "TreeShape":
        return dataclasses.replace(self, **changes)

    def describe(self) -> dict:
        """The shape as plain JSON values (what bench results and recorded lessons keep)."""
        if self.kind == "static":
            return {"kind": "static", "total_tokens": self.total_tokens}
        out = {"kind": "dynamic", "depth": self.depth, "top_k": self.top_k, "total_tokens": self.total_tokens}
        if self.min_prob:
            out["min_prob"] = self.min_prob
        return out
