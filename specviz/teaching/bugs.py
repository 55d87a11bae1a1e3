"""The bug zoo: plausible mistakes in speculative verification, each a small named function.

Every variant swaps exactly one piece of the correct rule in :mod:`specviz.core.verify` (see
:class:`specviz.core.verify.Policy`) and is selected with ``verify(..., policy=get_policy(NAME))``, the
engine's ``variant`` and ``python -m specviz.lossless --broken NAME``. Their bilingual explanations
are i18n strings (:func:`explain`); :data:`DEFAULT_BROKEN` is the negative control of a bare ``--broken``.

Which trees a variant touches: greedy-draft only deterministic drafts (top-k/argmax/PLD) at
temperature > 0; raw-logit-q and scalar-residual only drawn drafts (SpS chain, SpecInfer tree);
the others every tree at temperature > 0 (no-rejection also greedy).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from .. import SpecVizError
from ..i18n import t
from ..core.verify import CORRECT, Policy, residual_correct

DEFAULT_BROKEN = "resample-from-p"


# ---------------------------------------------------------------------------- the broken pieces
def bonus_from_raw(p_row: torch.Tensor, p_raw_row: torch.Tensor | None) -> torch.Tensor:
    """unwarped-bonus: after a full path, draw from softmax(raw logits), not the warped p."""
    return p_raw_row


def q_from_draft_softmax(drawn: bool) -> str:
    """greedy-draft: use the draft's softmax as q even when the token was its argmax."""
    return "dists"


def q_from_raw_draft(drawn: bool) -> str:
    """raw-logit-q: compare against the draft's *unprocessed* distribution."""
    return "raw_dists" if drawn else "onehot"


def residual_scalar(w: torch.Tensor, q: torch.Tensor, x: int, drawn: bool) -> torch.Tensor:
    """scalar-residual: norm(max(p - q(x), 0)), subtracting the number q(x) from every entry."""
    if not drawn:
        return residual_correct(w, q, x, drawn)
    r = (w - q[x]).clamp(min=0)
    s = r.sum()
    return r / s if s > 0 else w


def reject_from_p(w_res: torch.Tensor, p_row: torch.Tensor) -> torch.Tensor:
    """resample-from-p: after a rejection, draw from p itself instead of the residual."""
    return p_row


def accept_always(px: float, qx: float) -> float:
    """no-rejection: every draft token is accepted."""
    return 1.0


def accept_always_vec(w: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    return torch.ones_like(w)


POLICIES: dict[str, Policy] = {
    "unwarped-bonus": replace(CORRECT, name="unwarped-bonus", bonus_dist=bonus_from_raw, needs_p_raw=True),
    "greedy-draft": replace(CORRECT, name="greedy-draft", q_source=q_from_draft_softmax),
    "raw-logit-q": replace(CORRECT, name="raw-logit-q", q_source=q_from_raw_draft),
    "scalar-residual": replace(CORRECT, name="scalar-residual", residual=residual_scalar, residual_depends_on_x=True),
    "resample-from-p": replace(CORRECT, name="resample-from-p", reject_dist=reject_from_p),
    "no-rejection": replace(CORRECT, name="no-rejection", accept_prob=accept_always, accept_vec=accept_always_vec),
}

VARIANTS = ["correct", *POLICIES]



def get_policy(name: str | None) -> Policy:
    """The rule called `name`: "correct" (or None) or one of the bugs in :data:`POLICIES`."""
    if name in (None, "correct"):
        return CORRECT
    if name not in POLICIES:
        raise SpecVizError(f"Unknown verification variant {name!r}; choose one of: correct, {', '.join(POLICIES)}.")
    return POLICIES[name]


# ---------------------------------------------------------------------------- explanations
# Each bug's title, explanation and when it shows live in specviz.i18n as bug.<name>.<part>.
BUGS: dict[str, dict[str, str]] = {
    name: {part: f"bug.{name}.{part}" for part in ("title", "explain", "when")} for name in POLICIES
}


def explain(name: str, lang: str = "en") -> dict[str, str]:
    """Title, explanation and visibility condition of a bug in one language ("en" or "zh")."""
    keys = BUGS[name]
    return {"title": t(keys["title"], lang), "explain": t(keys["explain"], lang), "visible_when": t(keys["when"], lang)}
