"""SpecViz: `streamlit run app.py`. Navigation and the shared sidebar; pages live in pages/."""

from __future__ import annotations

import streamlit as st

from specviz.appstate import render_sidebar, tr

st.set_page_config(page_title="SpecViz", page_icon=":material/account_tree:", layout="wide")
render_sidebar()

pages = [
    st.Page("pages/home.py", title=tr("nav.home"), icon=":material/home:", default=True),
    st.Page("pages/decode.py", title=tr("nav.decode"), icon=":material/account_tree:", url_path="decode"),
    st.Page("pages/compare.py", title=tr("nav.compare"), icon=":material/compare_arrows:", url_path="compare"),
    st.Page("pages/lossless.py", title=tr("nav.lossless"), icon=":material/verified:", url_path="lossless"),
    st.Page("pages/free.py", title=tr("nav.free"), icon=":material/bolt:", url_path="free"),
    st.Page("pages/rule.py", title=tr("nav.rule"), icon=":material/casino:", url_path="rule"),
]
st.session_state["_in_app_run"] = True
try:
    st.navigation(pages).run()
finally:
    st.session_state["_in_app_run"] = False
