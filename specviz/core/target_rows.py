"""The target's distribution after each draft-tree node, computed only for the nodes a round uses.

Why: a verify pass must run every node through the transformer (their K/V and hidden states),
but the LM head (49k x 576 multiply-adds per row) and the warping (a 49k sort per row under
top-p) are only needed where the acceptance walk goes (the root and the accepted path) and, for
a detailed trace's p of every drafted token, at the tree's inner nodes. The leaves the walk never
reaches, about half of a 24-node tree, then cost nothing (a classroom server spent ~17% of its
CPU on LM-head rows and warping). A row is the same, bit for bit, as in a whole-matrix
computation: the block LM head and the warpers work row by row (tests/test_target_rows.py).

`rows.p` and `rows.raw` (plain softmax, when asked for) index like [N, V] tensors where the
acceptance walk needs it: `view[i]`, `view[i, token]`, `view.shape`, `view.dim()`.
"""

from __future__ import annotations

from typing import Callable

import torch

from ..runtime import qkernel
from .sampling import SamplingParams, probs


def argmax_rows(logits: torch.Tensor) -> list[int]:
    """torch.argmax of each row (the first largest entry, or the first NaN), in the compiled kernel
    for fp32 CPU rows when it is loaded (right after the LM head, a torch op runs with its code cold)."""
    lib = qkernel.loaded()
    if lib is not None and logits.device.type == "cpu" and logits.dtype == torch.float32 and logits.dim() == 2:
        x = logits.contiguous()
        out = torch.empty(x.shape[0], dtype=torch.long)
        lib.argmax_rows(x.data_ptr(), x.shape[0], x.shape[1], out.data_ptr())
        return out.tolist()
    return logits.argmax(-1).tolist()


class RowView:
    """One kind of row (warped p, or the raw softmax) as an [N, V] matrix filled on first use."""

    def __init__(self, owner: "TargetRows", kind: str):
        self._owner, self._kind = owner, kind

    @property
    def shape(self) -> tuple[int, int]:
        return (self._owner.n, self._owner.vocab)

    def dim(self) -> int:
        return 2

    def __getitem__(self, index):
        if isinstance(index, tuple):
            row, col = index
            return self._owner.row(int(row), self._kind)[col]
        return self._owner.row(int(index), self._kind)


class BestView:
    """The argmax of each row (greedy rounds), computed with the row."""

    def __init__(self, owner: "TargetRows"):
        self._owner = owner

    def __getitem__(self, index) -> int:
        return self._owner.best(int(index))


class TargetRows:
    """Rows of p (and of the raw softmax, `raw=True`) for a tree of `n` nodes; `logits_of(rows)`
    returns the raw logits [len(rows), V] of those nodes. Rows are kept on `device`."""

    def __init__(self, logits_of: Callable[[list[int]], torch.Tensor], n: int, vocab: int, params: SamplingParams,
                 raw: bool = False, device="cpu"):
        self._logits_of, self.n, self.vocab, self.params, self.want_raw = logits_of, int(n), int(vocab), params, raw
        self.device = torch.device(device)
        self._p: dict[int, torch.Tensor] = {}
        self._raw: dict[int, torch.Tensor] = {}
        self._best: dict[int, int] = {}
        self.p = RowView(self, "p")
        self.raw = RowView(self, "raw") if raw else None
        self.argmax = BestView(self)

    def ensure(self, rows) -> None:
        """Compute the missing rows among `rows` with one LM-head call."""
        missing = sorted({int(r) for r in rows} - self._p.keys())
        if not missing:
            return
        bad = [r for r in missing if not 0 <= r < self.n]
        if bad:
            raise IndexError(f"tree row {bad[0]} out of range for {self.n} nodes")
        self._store(missing, self._logits_of(missing))

    def fill(self, rows: list[int], logits: torch.Tensor) -> None:
        """Take rows computed elsewhere (a batch's one LM-head call for all its sequences): `logits`
        [len(rows), V] are the raw logits of `rows`, as `logits_of(rows)` would return them."""
        if len(rows) != len(logits):
            raise ValueError(f"{len(rows)} rows but {len(logits)} rows of logits")
        missing = [(r, i) for i, r in enumerate(rows) if int(r) not in self._p]
        if missing:
            self._store([int(r) for r, _ in missing], logits[[i for _, i in missing]])

    def _store(self, missing: list[int], logits: torch.Tensor) -> None:
        if self.params.greedy:  # one argmax serves p (one-hot) and the walk
            best = argmax_rows(logits)
            p = torch.zeros(len(missing), logits.shape[-1], dtype=torch.float32, device=logits.device)
            for r, b in enumerate(best):
                p[r, b] = 1.0
            self._best.update(zip(missing, best))
        else:
            p = probs(logits, self.params)  # WARPED target distributions (temperature, top-k, top-p)
        raw = logits.softmax(-1) if self.want_raw else None
        if p.device != self.device:
            p = p.to(self.device)
            raw = None if raw is None else raw.to(self.device)
        self._p.update(zip(missing, p))
        if raw is not None:
            self._raw.update(zip(missing, raw))

    def row(self, i: int, kind: str = "p") -> torch.Tensor:
        if i not in self._p:
            self.ensure([i])
        return self._p[i] if kind == "p" else self._raw[i]

    def best(self, i: int) -> int:
        if i not in self._p:
            self.ensure([i])
        if i not in self._best:  # sampled rounds: the argmax on request
            self._best[i] = int(self._p[i].argmax())
        return self._best[i]

    def computed(self) -> list[int]:
        """The rows computed so far, in node order."""
        return sorted(self._p)

    def matrix(self, rows: list[int], kind: str = "p") -> torch.Tensor:
        """Rows stacked as a [len(rows), V] tensor (computing any missing ones)."""
        self.ensure(rows)
        src = self._p if kind == "p" else self._raw
        return torch.stack([src[r] for r in rows])

    def gather(self, rows: list[int], cols: list[int]) -> list[float]:
        """p[rows[k], cols[k]] for each k, as floats."""
        if not rows:
            return []
        self.ensure(rows)
        return [float(self._p[r][c]) for r, c in zip(rows, cols)]
