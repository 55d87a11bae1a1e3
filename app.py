"""SpecViz: `streamlit run app.py`. Navigation and the shared sidebar.

Pages live in views/, not pages/: Streamlit would serve a deep link such as /decode from a
pages/ file before app.py has declared the navigation."""

from __future__ import annotations

import streamlit as st

from specviz.app.sidebar import render_sidebar
from specviz.app.state import tr

st.set_page_config(page_title="SpecViz", page_icon=":material/account_tree:", layout="wide")
render_sidebar()

pages = [
    st.Page("views/lesson.py", title=tr("nav.lesson"), icon=":material/school:", url_path="lesson"),
    st.Page("views/home.py", title=tr("nav.home"), icon=":material/home:", default=True),
    st.Page("views/decode.py", title=tr("nav.decode"), icon=":material/account_tree:", url_path="decode"),
    st.Page("views/compare.py", title=tr("nav.compare"), icon=":material/compare_arrows:", url_path="compare"),
    st.Page("views/lossless.py", title=tr("nav.lossless"), icon=":material/verified:", url_path="lossless"),
    st.Page("views/free.py", title=tr("nav.free"), icon=":material/bolt:", url_path="free"),
    st.Page("views/serving.py", title=tr("nav.batch"), icon=":material/groups:", url_path="batch"),
    st.Page("views/rule.py", title=tr("nav.rule"), icon=":material/casino:", url_path="rule"),
    st.Page("views/mistakes.py", title=tr("nav.mistakes"), icon=":material/bug_report:", url_path="mistakes"),
    st.Page("views/inside.py", title=tr("nav.inside"), icon=":material/psychology:", url_path="inside"),
]
st.session_state["_in_app_run"] = True
try:
    st.navigation(pages).run()
finally:
    st.session_state["_in_app_run"] = False
