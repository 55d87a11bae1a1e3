"""Inside the drafter: what EAGLE-1, 2 and 3 read, write and learn, from our own heads.

Recorded views (`assets/inside/inside.json`, `python -m specviz.inside record`) draw at once; the
single-prompt views are recomputed on the user's prompt on request. Ablations come from
`assets/ablations/ablations.json` (`python -m specviz.train ablate`)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import streamlit as st

from specviz import SpecVizError
from specviz.app.gate import heavy_work
from specviz.app.model import get_target
from specviz.app.prompts import prompt_ids
from specviz.app.sidebar import page_setup
from specviz.app.state import lang, tr
from specviz.drafters.eagle import shared_head
from specviz.i18n import t
from specviz.heads.io import shipped_head_dir
from specviz.inside import expansion, feature, fusion
from specviz.inside.record import OUT as RECORDING, expansion_view
from specviz.inside.ttt import per_step, ttt_mask
from specviz.train.ablations import SHIPPED as ABLATIONS
from specviz.viz import inside as V

CFG = {"displaylogo": False}
page_setup()
L = lang()
st.title(tr("ins.title"))
st.markdown(tr("ins.intro"))


@st.cache_data(show_spinner=False)
def _read(path: str, stamp: float):
    return json.loads(Path(path).read_text())


def read_json(path: Path) -> dict | None:
    return _read(str(path), path.stat().st_mtime) if path.is_file() else None


rec = read_json(RECORDING)
abl = read_json(ABLATIONS)
live: dict | None = st.session_state.get("ins_live")

mode = st.radio(tr("ins.source"), ["recorded", "live"], format_func=lambda k, lang=L: t(f"ins.src.{k}", lang),
                horizontal=True, key="ins_mode")
target = None
if mode == "live":
    target = get_target()
    if target is None:
        st.stop()
    c = st.columns([4, 1])
    prompt = c[0].text_input(tr("ins.prompt"), value="Write a Python function that returns the factorial of n.",
                             max_chars=1500, key="ins_prompt")
    if c[1].button(tr("ins.compute"), type="primary", key="ins_compute"):
        st.session_state.pop("ins_error", None)
        try:
            with heavy_work(), st.spinner(tr("ins.computing")):
                ids = prompt_ids(target, prompt)
                m, tok = target.model, target.tokenizer
                e1, e3 = shared_head(target, "eagle1")[0], shared_head(target, "eagle3")[0]
                live = dict(feature=feature.feature_chain(m, tok, e1, ids),
                            uncertainty=dict(feature.uncertainty(m, tok, {"with_token": e1, "without_token": None}, ids),
                                             prompt=prompt, context_text="", heads="shipped"),
                            expansion=expansion_view(target, "eagle2", ids), fusion=fusion.logit_lens(m, tok, e3, ids))
            st.session_state["ins_live"] = live
        except SpecVizError as e:
            st.session_state["ins_error"] = str(e)
    if st.session_state.get("ins_error"):
        st.error(tr("ins.error", e=st.session_state["ins_error"]))
    if live is None:
        st.info(tr("ins.no_live"))

if rec is None:
    st.warning(tr("ins.missing", path="assets/inside/inside.json", cmd="python -m specviz.inside record"))
    st.stop()
view = live if (mode == "live" and live) else rec
source_note = tr("ins.live_on") if view is live else tr(
    "ins.recorded_on", cmd=rec["recorded"].get("command", "?"), cpu=rec["recorded"].get("cpu", "?"),
    cpu_id=rec["recorded"].get("cpu_id", "?"), utc=rec["recorded"].get("utc", "?"),
    heads=", ".join(f"`{k} {v[:12]}`" for k, v in rec["recorded"].get("heads", {}).items()))


def df(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(rows).astype(str)


def tops(lst, n: int = 3) -> str:
    return ", ".join(f"{x[1]!r} {x[2]:.2f}" for x in lst[:n])


tabs = st.tabs([tr(f"ins.tab.{k}") for k in ("feature", "expansion", "fusion", "ttt", "vocab", "ablations")])

# ---------------------------------------------------------------- 1a EAGLE-1 features
with tabs[0]:
    fc = view["feature"]
    H = len(fc["steps"][0]["feature_out"])
    st.markdown(tr("ins.f.body", H=view["fusion"]["hidden"], n=len(fc["steps"]), d=fc["strip"]))
    st.dataframe(df([{tr("ins.f.col.step"): s["step"],
                      tr("ins.f.col.reads"): tr("ins.f.src_target" if s["reads"] == "target" else "ins.f.src_head"),
                      tr("ins.f.col.token"): repr(s["token_in_text"]), tr("ins.f.col.q"): tops(s["q_top"]),
                      tr("ins.f.col.drafted"): repr(s["drafted_text"]), tr("ins.f.col.target"): repr(s["target_text"]),
                      tr("ins.f.col.cos"): "–" if s["cos_to_target"] is None else f"{s['cos_to_target']:.3f}"}
                     for s in fc["steps"]]), hide_index=True)
    st.plotly_chart(V.feature_strips(fc, L), key="ins_strips", config=CFG)
    st.plotly_chart(V.feature_drift(fc, L), key="ins_drift", config=CFG)
    st.caption(tr("ins.f.drift_note"))
    st.subheader(tr("ins.u.title"))
    u = view["uncertainty"]
    if len(u["branches"]) < 2:
        st.info(tr("ins.u.one_token", n=len(u["draws"])))
    else:
        a, b = u["branches"]
        st.markdown(tr("ins.u.body", p=u["p_top"][0][2], T=u["temperature"], a=a["text"], b=b["text"], c=u["features_cos"]))
        if u.get("prompt"):
            st.caption(tr("ins.u.context", p=u["prompt"], c=u.get("context_text", "")[-160:]))
        rows = []
        for br in u["branches"]:
            row = {tr("ins.u.col.branch"): f"{br['text']!r} (p = {br['p']:.2f})",
                   tr("ins.u.col.truth"): tops(br["target_next"]), tr("ins.u.col.with"): tops(br["with_token"]["q_top"])}
            if "without_token" in br:
                row[tr("ins.u.col.without")] = tops(br["without_token"]["q_top"])
            rows.append(row)
        st.dataframe(df(rows), hide_index=True)
        st.plotly_chart(V.uncertainty_figure(u, L), key="ins_unc", config=CFG)
        if not all("without_token" in br for br in u["branches"]):
            st.caption(tr("ins.u.no_pair"))
        st.caption(tr(f"ins.u.heads.{u.get('heads', 'shipped')}"))
    st.caption(source_note)

# ---------------------------------------------------------------- 1b EAGLE-2 expansion, calibration
with tabs[1]:
    ev = view["expansion"]
    st.markdown(tr("ins.e.body", k=ev["tree"]["top_k"], d=ev["tree"]["depth"], n=ev["tree"]["total_tokens"] - 1))
    st.plotly_chart(V.expansion_figure(ev["levels"], L), key="ins_exp", config=CFG)
    st.dataframe(df([{tr("ins.e.col.level"): s["level"], tr("ins.e.col.scored"): s["scored"],
                      tr("ins.e.col.expanded"): s["expanded"], tr("ins.e.col.kept"): s["kept"]} for s in ev["summary"]]),
                 hide_index=True)
    st.caption(source_note)
    st.subheader(tr("ins.c.title"))
    cal = rec["calibration"]
    st.markdown(tr("ins.c.body", r=sum(cal[m]["rounds"] for m in ("eagle2", "eagle3")),
                   n=sum(cal[m]["nodes"] for m in ("eagle2", "eagle3")), p=cal["prompts"], t=cal["new_tokens"]))
    kind = st.radio(tr("ins.c.kind"), ["token", "path"], format_func=lambda k, lang=L: t(f"ins.c.kind.{k}", lang),
                    horizontal=True, key="ins_cal_kind")
    st.plotly_chart(V.calibration_figure(cal, kind, L), key="ins_cal", config=CFG)
    cols = st.columns(2)
    for col, m in zip(cols, ("eagle2", "eagle3")):
        col.caption(tr("ins.c.bins_of", m=tr(f"ins.c.{m}")))
        col.dataframe(df(V.calibration_rows(cal, m, kind, L)), hide_index=True)
    st.caption(tr("ins.c.recorded_only"))

# ---------------------------------------------------------------- 1c EAGLE-3 fusion
with tabs[2]:
    fl = view["fusion"]
    lo, mid, hi = fl["layers"]
    st.markdown(tr("ins.fu.body", L=fl["n_layers"], a=lo, b=mid, c=hi, H=fl["hidden"], H3=3 * fl["hidden"]))
    st.graphviz_chart(V.fusion_dot(fl, L))
    pl, pm, ph = (x["p_next"] for x in fl["taps"])
    st.markdown(tr("ins.fu.lens_body", t=fl["next_text"], u=fl["after_next_text"], pf=fl["final"]["p_next"], pl=pl, pm=pm, ph=ph))
    st.plotly_chart(V.lens_figure(fl, L), key="ins_lens", config=CFG)
    rows = [{tr("ins.fu.col.tap"): f"{x['tap']} (L{x['layer']})", tr("ins.fu.col.top"): tops(x["top"], 5)} for x in fl["taps"]]
    rows.append({tr("ins.fu.col.tap"): tr("ins.fu.final"), tr("ins.fu.col.top"): tops(fl["final"]["top"], 5)})
    if "head" in fl:
        rows.append({tr("ins.fu.col.tap"): tr("ins.fu.head_row", t=fl["next_text"]), tr("ins.fu.col.top"): tops(fl["head"]["top"], 5)})
    st.dataframe(df(rows), hide_index=True)
    if "head" in fl:
        st.markdown(tr("ins.fu.head_right" if fl["head"]["right"] else "ins.fu.head_wrong", u=fl["after_next_text"]))
    st.caption(source_note)

# ---------------------------------------------------------------- 1d training-time test
with tabs[3]:
    st.markdown(tr("ins.t.body"))
    st.graphviz_chart(V.ttt_dot(3, L))
    T, S = 5, 3
    st.plotly_chart(V.ttt_mask_figure(ttt_mask(T, S), T, S, L), key="ins_mask", config=CFG)
    ps = per_step(shipped_head_dir("smollm2-135m-instruct", "eagle1").parent / "eval_per_step.json")
    series = {"EAGLE-1": ps["eagle1"]["acc"], "EAGLE-3": ps["eagle3"]["acc"]}
    st.plotly_chart(V.accuracy_by_step(series, L), key="ins_acc", config=CFG)
    st.caption(tr("ins.t.acc_note", n=ps["eagle3"]["sequences"], a=ps["eagle3"]["anchors"]))
    if abl and all(a in abl["arms"] for a in abl["pairs"]["ttt"]):
        arms = abl["pairs"]["ttt"]
        st.plotly_chart(V.accuracy_by_step({a: abl["arms"][a]["heldout"]["acc"] for a in arms}, L,
                                           title_key="ins.t.ablation_title"), key="ins_acc_ttt", config=CFG)

# ---------------------------------------------------------------- 1e draft vocabulary
with tabs[4]:
    v = rec["vocab"]
    st.markdown(tr("ins.v.body", d=v["draft_vocab"], V=v["target_vocab"], p=rec["calibration"]["prompts"], n=v["answer_tokens"]))
    st.plotly_chart(V.vocab_figure(v, L), key="ins_vocab", config=CFG)
    st.markdown(tr("ins.v.lookup", k=v["lookup_tokens"]))
    c1, c2 = st.columns(2)
    c1.caption(tr("ins.v.common"))
    c1.dataframe(df([{tr("ins.v.col.token"): repr(x[1]), tr("ins.v.col.id"): x[0], tr("ins.v.col.count"): x[2]}
                     for x in v["commonest_outside"]]), hide_index=True)
    c2.caption(tr("ins.v.d2t"))
    c2.dataframe(df([{tr("ins.v.col.draft"): r[0], tr("ins.v.col.d2t"): r[1], tr("ins.v.col.target"): r[2],
                      tr("ins.v.col.token"): repr(r[3])} for r in v["d2t_rows"]]), hide_index=True)
    st.caption(source_note if view is rec else tr("ins.c.recorded_only"))

# ---------------------------------------------------------------- ablations
with tabs[5]:
    if not abl or not abl.get("arms"):
        st.info(tr("ins.a.missing", cmd="python -m specviz.train ablate", path="assets/ablations/ablations.json"))
    else:
        first = next(iter(abl["arms"].values()))
        st.markdown(tr("ins.a.body", seqs=first["data"]["train_sequences"], toks=first["data"]["train_tokens"],
                       steps=first["steps"], anchors=first["heldout"]["anchors"]))
        st.plotly_chart(V.ablation_figure(abl, L), key="ins_abl", config=CFG)
        st.subheader(tr("ins.a.claims"))
        for pair in abl["pairs"]:
            res = V.pair_verdict(abl, pair)
            if res is None:
                missing = next(a for a in abl["pairs"][pair] if a not in abl["arms"])
                st.caption(tr("ins.a.pair_missing", pair=tr(f"ins.a.pair.{pair}"), arm=missing,
                              cmd=f"python -m specviz.train ablate --steps {first['steps']} --arms {missing}"))
                continue
            verdict = tr(f"ins.a.verdict.{res['verdict']}", eps=res["eps"])
            st.markdown(tr(f"ins.a.claim.{pair}", w=res["w"], wo=res["wo"], d=res["d"], verdict=verdict))
        st.caption(tr("ins.a.papers"))
        st.plotly_chart(V.accuracy_by_step({n: a["heldout"]["acc"] for n, a in abl["arms"].items()}, L,
                                           title_key="ins.a.acc_title"), key="ins_abl_acc", config=CFG)
        st.dataframe(df(V.ablation_rows(abl, L)), hide_index=True)
        st.caption(tr("ins.a.init", d=", ".join(f"{n} `{a['init']['sha256']}`" for n, a in abl["arms"].items())))
        st.caption(tr("ins.a.command", cmd=first["command"], min=sum(a["wall_minutes"] for a in abl["arms"].values())))
