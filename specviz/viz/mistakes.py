"""The "Spot the mistake" evidence as plain rows: what the correct engine and the mistaken one did.

Pure: a :class:`specviz.mistakes.run.CaseResult` in, rows of strings out (tested without a browser).
"""

from __future__ import annotations

from ..i18n import t
from ..mistakes.run import CaseResult, EXACT_TOL, shown_class


def _identity(r: CaseResult, which: str, lang: str) -> str:
    run = r.mistaken if which == "mistaken" else r.correct
    if run.tokens == r.vanilla.tokens:
        return t("mis.yes", lang)
    first = next((i for i, (a, b) in enumerate(zip(run.tokens, r.vanilla.tokens)) if a != b),
                 min(len(run.tokens), len(r.vanilla.tokens)))
    return t("mis.no_at", lang, i=first + 1)


def _exact(d: float | None, lang: str) -> str:
    if d is None:
        return t("mis.na", lang)
    return t("mis.pass" if d <= EXACT_TOL else "mis.fail", lang, d=d)


def _num(x: float | None, fmt: str = "{:.3f}", lang: str = "en") -> str:
    return t("mis.na", lang) if x is None else fmt.format(x)


def evidence_rows(r: CaseResult, lang: str = "en") -> list[dict[str, str]]:
    """One row per check: its label, the correct engine's value, the mistaken one's."""
    c, m = t("mis.col.correct", lang), t("mis.col.mistaken", lang)
    what = " "  # the check's label column has no heading
    rows = [
        (t("mis.row.identical", lang, n=len(r.vanilla.tokens)), _identity(r, "correct", lang), _identity(r, "mistaken", lang)),
        (t("mis.row.exact", lang), _exact(r.exact_correct, lang), _exact(r.exact_mistaken, lang)),
        (t("mis.row.accept", lang), _num(r.accept_correct, lang=lang), _num(r.accept_mistaken, lang=lang)),
        (t("mis.row.tau", lang), f"{r.correct.tau:.2f}", f"{r.mistaken.tau:.2f}"),
        (t("mis.row.work", lang), f"{r.correct.work_per_token:.2f}", f"{r.mistaken.work_per_token:.2f}"),
        (t("mis.row.tps", lang), f"{r.correct.tokens_per_s:.1f}", f"{r.mistaken.tokens_per_s:.1f}"),
    ]
    if r.printed is not None:
        label = t("mis.row.printed", lang, what=t("mis.what." + r.printed.what, lang))
        rows.append((label, f"{r.printed.true:.3f}", f"{r.printed.printed:.3f}"))
    return [{what: a, c: b, m: d} for a, b, d in rows]


def verdict(r: CaseResult, lang: str = "en") -> str:
    """What the evidence shows, in words."""
    return t("mis.shown", lang, cls=t("mis.class." + shown_class(r), lang))
