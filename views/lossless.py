"""Losslessness: exact check of one round, and vanilla vs speculative samples; the bug zoo."""

from __future__ import annotations



import streamlit as st

from specviz import SpecVizError
from specviz.appstate import (
    heavy_work,
    prompt_ids,
    page_setup,
    get_target,
    lang,
    make_drafter,
    method_label,
    method_status,
    run_generation,
    settings,
    tr,
)
from specviz.viz import figure_html, samples_hist_figure, show_token

page_setup()
L = lang()
st.title(tr("loss.title"))
st.markdown(tr("loss.intro"))

try:
    from specviz import bugs, lossless
except ImportError:
    st.info(tr("loss.pending"))
    st.stop()

target = get_target()
if target is None:
    st.stop()
LOSS_PROMPTS = ["Tell me a story.", "Write a random word.", "Name a colour."]
if "loss_prompt" not in st.session_state:
    st.session_state["loss_prompt"] = LOSS_PROMPTS[0]
st.text_area(tr("c.prompt"), key="loss_prompt", height=70, max_chars=4000, persist_state="session")
st.caption(tr("loss.prompt_hint"))

TOY = {
    "toy-sps": ("toy SpS: chain of 2 sampled drafts (Leviathan/Chen rule)", "玩具 SpS：2 个采样草稿组成的链（Leviathan/Chen 规则）"),
    "toy-specinfer": ("toy SpecInfer: tree of sampled drafts (2 children at depth 1)", "玩具 SpecInfer：采样草稿树（第 1 层 2 个子节点）"),
    "toy-topk": ("toy top-k tree: deterministic children (EAGLE-2/3 rule)", "玩具 top-k 树：确定性子节点（EAGLE-2/3 规则）"),
}
s = settings()
engine_methods = [m for m in ("pld", "sps", "medusa", "eagle1", "eagle2", "eagle3") if method_status(m, s["dtype"])[0]]
options = list(TOY) + engine_methods


def _label(m):
    if m in TOY:
        return TOY[m][1 if L == "zh" else 0]
    return method_label(m)


# deep link: ?variant=NAME&loss_method=M opens the page on a bug of the zoo
if "loss_variant" not in st.session_state and st.query_params.get("variant") in bugs.VARIANTS:
    st.session_state["loss_variant"] = st.query_params["variant"]
if "loss_method" not in st.session_state and st.query_params.get("check_method") in options:
    st.session_state["loss_method"] = st.query_params["check_method"]

c = st.columns(4)
method = c[0].selectbox(tr("sb.method"), options, format_func=_label, key="loss_method")
temperature = c[1].slider(tr("sb.temperature"), 0.0, 2.0, 0.7, 0.05, key="loss_temp")
top_k = c[2].number_input(tr("sb.top_k"), 0, 1000, 0, key="loss_topk", disabled=temperature == 0)
top_p = c[3].slider(tr("sb.top_p"), 0.05, 1.0, 0.9, 0.05, key="loss_topp", disabled=temperature == 0)
c = st.columns(4)
samples = c[0].select_slider(tr("loss.samples"), [200, 500, 1000, 2000, 5000, 10000], value=1000, key="loss_n")
horizon = c[1].select_slider(tr("loss.horizon"), [1, 2, 3], value=2, key="loss_h")
seed = c[2].number_input(tr("sb.seed"), 0, 2**31 - 1, 0, key="loss_seed")
variant = c[3].selectbox(tr("loss.variant"), bugs.VARIANTS, key="loss_variant",
                         format_func=lambda v: tr("loss.correct") if v == "correct" else f"✗ {bugs.explain(v, L)['title']}")
if variant != "correct":
    e = bugs.explain(variant, L)
    st.warning(f"**{e['title']}** (`{variant}`) — {e['explain']}\n\n*{e['visible_when']}*")
st.caption(tr("c.stop_hint"))


def _params():
    from specviz.sampling import SamplingParams

    return SamplingParams(temperature=float(temperature), top_k=int(top_k), top_p=float(top_p))


def _drafter_for(m):
    return m if m in TOY else make_drafter(m, target, settings())


def run():
    st.session_state.pop("loss_error", None)
    try:
        text = st.session_state.get("loss_prompt", "")
        if not text.strip():
            raise SpecVizError(tr("c.empty_prompt"))
        params = _params()
        if params.greedy:
            s2 = dict(settings(), temperature=0.0, seed=int(seed))
            if method in TOY:
                raise SpecVizError(tr("loss.greedy_note") + " → PLD / EAGLE")
            a = run_generation(target, s2, text, method)
            b = run_generation(target, s2, text, "vanilla")
            st.session_state["loss_result"] = {"greedy": True, "same": a.tokens == b.tokens, "n": len(a.tokens), "method": method}
            return
        ids = prompt_ids(target, text)
        runs = {}
        todo = ["correct"] if variant == "correct" else ["correct", variant]
        bar = st.progress(0.0)
        with heavy_work():
            oracle = lossless.TargetOracle(target, ids, params)
            for k, v in enumerate(todo):
                def prog(done, total, k=k):
                    bar.progress(min(1.0, (k + done / max(1, total)) / len(todo)), text=f"{v}: {done}/{total}")

                runs[v] = lossless.run_check(target, _drafter_for(method), ids, params, samples=int(samples), horizon=int(horizon),
                                             seed=int(seed), variant=v, progress=prog, oracle=oracle)
        bar.empty()
        st.session_state["loss_result"] = {"greedy": False, "runs": runs, "method": method, "variant": variant}
    except SpecVizError as e:
        st.session_state["loss_error"] = str(e)


if st.button(tr("loss.run"), type="primary", key="loss_run"):
    run()

if st.session_state.get("loss_error"):
    st.error(tr("c.error", err=st.session_state["loss_error"]))

res = st.session_state.get("loss_result")
if res and res["greedy"]:
    st.info(tr("loss.greedy_note"))
    (st.success if res["same"] else st.error)(tr("loss.greedy_identical", same=tr("home.yes") if res["same"] else tr("home.no"))
                                              + f" ({res['n']} tokens, {method_label(res['method'])})")
elif res:
    runs = res["runs"]
    tok = target.tokenizer

    def outcome_label(o):
        return "".join(show_token(tok.token_text(x)) for x in o)[:24]

    cols = st.columns(len(runs))
    for col, (v, r) in zip(cols, runs.items()):
        with col:
            name = tr("loss.correct") if v == "correct" else f"✗ {bugs.explain(v, L)['title']}"
            st.markdown(f"#### {name}")
            ok = r.passed
            (st.success if ok else st.error)(tr("loss.pass") if ok else tr("loss.fail"))
            m = st.columns(2)
            m[0].metric(tr("loss.chi2"), f"{r.p_value:.3g}")
            m[1].metric(tr("loss.tv"), f"{r.tv:.4f}", help=f"{tr('loss.tv_bound')}: {r.tv_bound:.4f}")
            m = st.columns(2)
            m[0].metric(tr("loss.tv_bound"), f"{r.tv_bound:.4f}")
            m[1].metric(tr("loss.maxdiff"), "–" if r.exact_max_diff is None else f"{r.exact_max_diff:.1e}")
            st.caption(f"{tr('loss.exact')}: k = {r.exact_k}, {r.drafted_at_prompt} draft tokens at the prompt · "
                       f"chi² = {r.chi2:.1f}, dof = {r.dof} · tau = {r.tau:.2f} · {r.samples} × 2 samples in {r.seconds:.1f} s")
            for note in r.notes:
                st.caption("ℹ️ " + note)
            van, spec = r.vanilla, r.speculative
            keys = sorted(set(van) | set(spec), key=lambda o: -(van.get(o, 0) + spec.get(o, 0)))
            top = keys[:25]
            rest = keys[25:]
            labels = [outcome_label(o) for o in top] + ([f"other ({len(rest)})"] if rest else [])
            cv = [van.get(o, 0) for o in top] + ([sum(van.get(o, 0) for o in rest)] if rest else [])
            cs = [spec.get(o, 0) for o in top] + ([sum(spec.get(o, 0) for o in rest)] if rest else [])
            # make labels unique for the x axis
            seen = {}
            uniq = []
            for lab in labels:
                seen[lab] = seen.get(lab, 0) + 1
                uniq.append(lab if seen[lab] == 1 else f"{lab} [{seen[lab]}]")
            fig = samples_hist_figure(uniq, {tr("loss.vanilla"): cv, tr("loss.spec"): cs}, L)
            st.plotly_chart(fig, key=f"loss_hist_{v}", config={"displaylogo": False})
            st.download_button(tr("c.download_html"), lambda fig=fig: figure_html(fig), file_name=f"lossless_{v}.html",
                               mime="text/html", key=f"dl_loss_{v}")

st.divider()
st.subheader(tr("loss.bug_zoo"))
for v in bugs.VARIANTS:
    if v == "correct":
        continue
    e = bugs.explain(v, L)
    with st.expander(f"✗ {e['title']} · `{v}`"):
        st.markdown(e["explain"])
        st.caption(e["visible_when"])

