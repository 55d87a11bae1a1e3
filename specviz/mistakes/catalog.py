"""The mistakes a student makes outside the acceptance rule, each filed under what it does.

Three classes: ``breaks`` (the output is no longer the target's), ``slower`` (the output is the
target's, only fewer tokens per pass or more work per token), ``misreports`` (the engine is right;
the number printed about it is not). Texts (title, description, pseudo-code, answer) are i18n strings
``mis.<name>.*``; the pseudo-code is in our own words.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import SpecVizError

CLASSES = ("breaks", "slower", "misreports")


@dataclass(frozen=True)
class Mistake:
    name: str
    kind: str  # one of CLASSES
    drafter: str  # what it runs on: "eagle3-chain" / "eagle1-chain" (that head drafting a chain of 4), "sps" (SpS, 4 drafts), "none"
    zoo: str | None = None  # the bug zoo's name when the mistake is one of its policies (specviz.teaching.bugs)
    in_one_round: bool = False  # the mistake lives in one round's drafts or rule: the exact check at T = 1 applies

    def key(self, part: str) -> str:
        return f"mis.{self.name}.{part}"


MISTAKES: tuple[Mistake, ...] = (
    Mistake("target-trained", "breaks", "eagle1-chain", in_one_round=True),
    Mistake("padding-no-mask", "breaks", "none"),
    Mistake("scalar-residual", "breaks", "sps", zoo="scalar-residual", in_one_round=True),
    Mistake("stale-feature", "slower", "eagle3-chain", in_one_round=True),
    Mistake("hot-draft", "slower", "sps", in_one_round=True),
    Mistake("no-bonus", "slower", "eagle3-chain"),
    Mistake("uncached-draft", "slower", "eagle3-chain", in_one_round=True),
    Mistake("correction-counted", "misreports", "eagle3-chain"),
    Mistake("rate-over-k-plus-1", "misreports", "eagle3-chain"),
    Mistake("uncached-baseline", "misreports", "eagle3-chain"),
)
BY_NAME = {m.name: m for m in MISTAKES}


def get(name: str) -> Mistake:
    if name not in BY_NAME:
        raise SpecVizError(f"Unknown mistake {name!r}; choose one of: {', '.join(BY_NAME)}.")
    return BY_NAME[name]
