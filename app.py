"""SpecViz: `streamlit run app.py`. Navigation and the shared sidebar; pages live in pages/."""

from __future__ import annotations

import streamlit as st

from specviz.appstate import DEFAULTS, METHODS, lang, method_label, method_status, status_note, tr
from specviz.i18n import LANGS

st.set_page_config(page_title="SpecViz", page_icon="🌳", layout="wide")

# ---------------------------------------------------------------- sidebar (rendered on every page)
with st.sidebar:
    st.selectbox(tr("sb.language"), list(LANGS), format_func=LANGS.get, key="lang", bind="query-params")
    st.markdown(f"### {tr('sb.model')}")
    st.caption(tr("sb.model_default"))
    st.radio(tr("sb.dtype"), ["fp32", "bf16"], key="dtype", horizontal=True, help=tr("sb.dtype_help"), bind="query-params")
    dtype = st.session_state.get("dtype", "fp32")
    status = {m: method_status(m, dtype) for m in METHODS}
    captions = ["" if ok else tr("sb.unavailable", note=status_note(note)) for ok, note in (status[m] for m in METHODS)]
    if "method" not in st.session_state:
        st.session_state["method"] = DEFAULTS["method"] if status[DEFAULTS["method"]][0] else "vanilla"
    st.radio(tr("sb.method"), METHODS, format_func=method_label, captions=captions, key="method", bind="query-params")

    st.markdown(f"### {tr('sb.sampling')}")
    st.slider(tr("sb.temperature"), 0.0, 2.0, DEFAULTS["temperature"], 0.05, key="temperature", bind="query-params")
    greedy = st.session_state.get("temperature", 0.0) == 0
    st.number_input(tr("sb.top_k"), 0, 1000, DEFAULTS["top_k"], 1, key="top_k", disabled=greedy, bind="query-params")
    st.slider(tr("sb.top_p"), 0.05, 1.0, DEFAULTS["top_p"], 0.05, key="top_p", disabled=greedy, bind="query-params")
    st.number_input(tr("sb.seed"), 0, 2**31 - 1, DEFAULTS["seed"], 1, key="seed", bind="query-params")
    st.number_input(tr("sb.max_new"), 1, 512, DEFAULTS["max_new"], 1, key="max_new", bind="query-params")

    with st.expander(tr("sb.tree"), expanded=False):
        m = st.session_state.get("method", "vanilla")
        st.number_input(tr("sb.pld_ngram"), 1, 8, DEFAULTS["pld_ngram"], key="pld_ngram", disabled=m != "pld", bind="query-params")
        st.number_input(tr("sb.pld_tokens"), 1, 32, DEFAULTS["pld_tokens"], key="pld_tokens", disabled=m != "pld", bind="query-params")
        dyn = m in ("eagle2", "eagle3", "sps")
        st.number_input(tr("sb.depth"), 1, 12, DEFAULTS["depth"], key="depth", disabled=not dyn, bind="query-params")
        st.number_input(tr("sb.tree_topk"), 1, 16, DEFAULTS["tree_topk"], key="tree_topk", disabled=m not in ("eagle2", "eagle3"), bind="query-params")
        st.number_input(tr("sb.total_tokens"), 2, 128, DEFAULTS["total_tokens"], key="total_tokens", disabled=m not in ("eagle2", "eagle3"), bind="query-params")

# ---------------------------------------------------------------- pages
pages = [
    st.Page("pages/home.py", title=tr("nav.home"), icon="🏠", default=True),
    st.Page("pages/decode.py", title=tr("nav.decode"), icon="🌳", url_path="decode"),
    st.Page("pages/compare.py", title=tr("nav.compare"), icon="⚖️", url_path="compare"),
    st.Page("pages/lossless.py", title=tr("nav.lossless"), icon="🎯", url_path="lossless"),
    st.Page("pages/free.py", title=tr("nav.free"), icon="⚡", url_path="free"),
    st.Page("pages/rule.py", title=tr("nav.rule"), icon="🎲", url_path="rule"),
]
st.navigation(pages).run()
_ = lang  # the language is read by every page through specviz.appstate.tr
