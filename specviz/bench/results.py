"""A batched benchmark (`by_batch`, specviz.bench.batched) put into words for the page "When
speculation stops paying" and the lesson: where EAGLE-3 stops beating vanilla, with the measured
numbers, and on which machine. Only reading: every number comes from the report."""

from __future__ import annotations

from .batched import crossover
from ..i18n import t
from .measured import is_gpu_run
from ..viz.batch import batch_sizes, method_label

SPEC = "eagle3"  # the method whose crossover the page states


def crossover_summary(by_batch: dict, method: str = SPEC, base: str = "vanilla") -> dict | None:
    """{'b': the crossover B (None: ahead at every measured B), 'at': the B the numbers are taken at
    (the crossover, else the largest B), 'tps' and 'base_tps' there; 'last_ahead': the largest B
    below the crossover (None when there is none) with 'last_tps' and 'last_base'; 'smallest' and
    'largest' measured B, with 'largest_tps' and 'largest_base'}; None when either method is missing."""
    bs = [b for b in batch_sizes(by_batch) if method in by_batch[str(b)] and base in by_batch[str(b)]]
    if not bs:
        return None
    b = crossover({str(x): by_batch[str(x)] for x in bs}, method, base)
    at = b if b is not None else bs[-1]
    ahead = [x for x in bs if (b is None or x < b)]

    def tps(x, m):
        return by_batch[str(x)][m]["throughput_tok_s"] if x is not None else None

    last = ahead[-1] if ahead else None
    return {"b": b, "at": at, "tps": tps(at, method), "base_tps": tps(at, base), "last_ahead": last,
            "last_tps": tps(last, method), "last_base": tps(last, base),
            "smallest": bs[0], "largest": bs[-1], "largest_tps": tps(bs[-1], method), "largest_base": tps(bs[-1], base)}


def machine_label(report: dict, lang: str = "en") -> str:
    """The machine a report was measured on, in words: its GPU's name, or its CPU and threads."""
    m = report.get("machine") or {}
    if is_gpu_run(report):
        return str(m.get("cuda") or "GPU")
    return t("batch.cpu_threads", lang, cpu=m.get("cpu") or "CPU", n=m.get("threads") or "?")


def crossover_sentence(report: dict, lang: str = "en", method: str = SPEC) -> str:
    """The crossover stated with the measured numbers, e.g. "On <CPU> EAGLE-3 stops paying at B = 4 ..."."""
    by_batch = report.get("by_batch") or {}
    s = crossover_summary(by_batch, method)
    where = machine_label(report, lang)
    label = method_label(method, lang, report.get("trees"))
    if s is None:
        return t("batch.cross_missing", lang, m=label, where=where)
    ahead = t("batch.ahead_at" if s["last_ahead"] == s["smallest"] else "batch.ahead_upto", lang, b=s["last_ahead"])
    nums = dict(m=label, where=where, at=s["at"], tps=s["tps"], base=s["base_tps"], ahead=ahead, last_tps=s["last_tps"],
                last_base=s["last_base"], largest=s["largest"])
    if s["b"] is None:
        return t("batch.cross_never", lang, **nums)
    text = t("batch.cross_from_1" if s["last_ahead"] is None else "batch.cross_at", lang, **nums)
    if s["largest"] > s["at"]:
        text += t("batch.cross_tail", lang, largest=s["largest"], big_tps=s["largest_tps"], big_base=s["largest_base"],
                  ratio=s["largest_tps"] / s["largest_base"])
    return text


def report_caption(report: dict, lang: str = "en") -> str:
    """Where a shipped report came from: file, machine, date, prompts and tokens."""
    st_ = report.get("settings") or {}
    n = len(report.get("categories") or []) or st_.get("limit") or "?"
    return t("batch.report_caption", lang, file=report.get("file", "?"), where=machine_label(report, lang),
             date=str(report.get("date", "?"))[:10], n=n, tokens=st_.get("max_new_tokens", "?"), dtype=st_.get("dtype", "?"),
             T=st_.get("temperature", 0))


def tree_words(tree: dict | None, lang: str = "en") -> str:
    """A report's tree description (specviz.drafters.base.describe_tree) in words."""
    if not tree:
        return t("batch.tree_none", lang)
    if tree.get("kind") == "static":
        text = t("batch.tree_static", lang, n=tree.get("total_tokens", "?"))
    else:
        text = t("batch.tree_dynamic", lang, d=tree.get("depth", "?"), n=tree.get("total_tokens", "?"))
        if tree.get("min_prob"):
            text += t("batch.tree_floor", lang, p=tree["min_prob"])
    if tree.get("lookup"):
        text += t("batch.tree_lookup", lang, n=tree["lookup"])
    return text + (t("batch.tree_tuned", lang) if tree.get("source") == "device-tuned" else "")
