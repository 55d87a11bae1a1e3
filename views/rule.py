"""The acceptance rule on a toy vocabulary: editable p and q, exact pieces and a simulation."""

from __future__ import annotations

import numpy as np
import streamlit as st

from specviz.app.sidebar import page_setup
from specviz.app.state import lang, tr
from specviz.viz import figure_html, toy_chain_figure, toy_sim_figure, toy_two_figure
from specviz.viz import toy
from specviz.viz.compare import draw_bars_figure, u_threshold_figure

page_setup()
L = lang()
V = toy.TOY_VOCAB
st.title(tr("toy.title"))
st.markdown(tr("toy.intro"))


def apply_preset():
    p, q = toy.PRESETS[st.session_state["toy_preset"]]
    for i in range(len(V)):
        st.session_state[f"toy_p{i}"] = float(p[i])
        st.session_state[f"toy_q{i}"] = float(q[i])


if "toy_p0" not in st.session_state:
    st.session_state["toy_preset"] = "overconfident"
    apply_preset()

st.selectbox(tr("toy.preset"), list(toy.PRESETS), key="toy_preset", format_func=lambda k: tr("toy.preset." + k), on_change=apply_preset)
cp, cq = st.columns(2)
with cp:
    st.markdown(f"**{tr('toy.p_sliders')}**")
    for i, w in enumerate(V):
        st.slider(f"p({w})", 0.0, 1.0, step=0.01, key=f"toy_p{i}")
with cq:
    st.markdown(f"**{tr('toy.q_sliders')}**")
    for i, w in enumerate(V):
        st.slider(f"q({w})", 0.0, 1.0, step=0.01, key=f"toy_q{i}")

p_raw = np.array([st.session_state[f"toy_p{i}"] for i in range(len(V))])
q_raw = np.array([st.session_state[f"toy_q{i}"] for i in range(len(V))])
if q_raw.sum() <= 0 or p_raw.sum() <= 0:
    st.error(tr("toyx.need_mass"))
    st.stop()
parts = toy.chain_rule(p_raw, q_raw)

c = st.columns(3)
c[0].metric(tr("toy.alpha"), f"{parts.alpha:.3f}")
c[1].metric("TV(p, q)", f"{toy.tv_distance(parts.p, parts.q):.3f}")
c[2].metric(tr("toyx.max_err_label"), f"{np.abs(parts.output - parts.p).max():.1e}")
fig = toy_chain_figure(V, parts, L)
st.plotly_chart(fig, key="toy_chain", config={"displaylogo": False})
st.caption(tr("toy.residual") + ": " + ", ".join(f"{w} {r:.3f}" for w, r in zip(V, parts.residual)))
st.download_button(tr("c.download_html"), lambda: figure_html(fig), file_name="acceptance_rule.html", mime="text/html", key="dl_toy")


# ---------------------------------------------------------------------- one draw, step by step
st.divider()
st.subheader(tr("toyx.step_title"))
st.markdown(tr("toyx.step_intro"))
if "toy_draw_seed" not in st.session_state:  # deep link ?draw=S&step=K opens a given draw at a given step
    qd, qs = st.query_params.get("draw", ""), st.query_params.get("step", "")
    st.session_state["toy_draw_seed"] = int(qd) if qd.isdigit() and len(qd) < 9 else 0
    st.session_state["toy_step"] = int(qs) if qs in ("1", "2", "3", "4") else 1


def new_draw():
    st.session_state["toy_draw_seed"] += 1
    st.session_state["toy_step"] = 1


STEPS = [1, 2, 3, 4]
sc = st.columns([3, 1])
step = sc[0].select_slider(tr("toyx.step"), STEPS, key="toy_step", format_func=lambda k: tr(f"toyx.step{k}"))
sc[1].button(tr("toyx.new_draw"), key="toy_new_draw", on_click=new_draw)
d = toy.single_draw(parts.p, parts.q, seed=int(st.session_state["toy_draw_seed"]))
xw = V[d.x]
s1, s2 = st.columns(2)
with s1:
    st.plotly_chart(draw_bars_figure(V, parts.q, d.x, L, name=tr("toyx.q_title"), color="#7f7f7f"), key="toy_step_q",
                    config={"displaylogo": False})
    st.markdown(tr("toyx.s1", tok=xw, q=d.qx))
with s2:
    if step >= 2:
        st.plotly_chart(u_threshold_figure(d.u, d.threshold, L), key="toy_step_u", config={"displaylogo": False})
        st.markdown(tr("toyx.s2", tok=xw, p=d.px, q=d.qx, a=d.threshold, u=d.u)
                    + " " + tr("toyx.s2_accept" if d.accepted else "toyx.s2_reject"))
if step >= 3:
    if d.accepted:
        st.success(tr("toyx.s3_accepted", tok=xw))
    else:
        st.plotly_chart(draw_bars_figure(V, d.residual, d.y, L, name=tr("toyx.res_title"), color="#ff7f0e"),
                        key="toy_step_res", config={"displaylogo": False})
        st.warning(tr("toyx.s3_resampled", tok=V[d.y], r=float(d.residual[d.y]), x=xw))
if step >= 4:
    if d.accepted:
        st.plotly_chart(draw_bars_figure(V, d.bonus_dist, d.bonus, L, name=tr("toyx.bonus_title")), key="toy_step_bonus",
                        config={"displaylogo": False})
        st.info(tr("toyx.s4_bonus", tok=V[d.bonus], p=float(d.bonus_dist[d.bonus])))
    else:
        st.info(tr("toyx.s4_no_bonus"))
st.markdown(tr("toyx.onehot"))

sc = st.columns([2, 1])
n = sc[0].select_slider(tr("toy.draws"), [100, 1000, 10000, 100000], value=10000, key="toy_n")
seed = sc[1].number_input(tr("sb.seed"), 0, 10**6, 0, key="toy_seed")
sim = toy.simulate_chain(parts.p, parts.q, int(n), seed=int(seed))
st.plotly_chart(toy_sim_figure(V, sim["counts"], parts.p, L), key="toy_sim", config={"displaylogo": False})
st.caption(tr("toy.sim_result", n=int(n), a=sim["acceptance_rate"], alpha=parts.alpha, tv=toy.tv_distance(sim["counts"], parts.p)))

st.divider()
st.subheader(tr("toy.two_title"))
st.markdown(tr("toy.two_intro"))
order = list(np.argsort(-parts.q))
c2 = st.columns(2)
x1 = c2[0].selectbox(tr("toy.x1"), range(len(V)), index=int(order[0]), format_func=lambda i: V[i], key="toy_x1")
x2 = c2[1].selectbox(tr("toy.x2"), range(len(V)), index=int(order[1]), format_func=lambda i: V[i], key="toy_x2")
if x1 == x2:
    st.error(tr("toy.same_token"))
else:
    two = toy.two_candidates(parts.p, int(x1), int(x2))
    st.caption(tr("toy.two_numbers", a1=two.a1, a2=two.a2, acc=two.a1 + (1 - two.a1) * two.a2)
               + " · " + tr("toy.max_err", e=float(np.abs(two.output - two.p).max())))
    st.plotly_chart(toy_two_figure(V, two, L), key="toy_two", config={"displaylogo": False})
    sim2 = toy.simulate_two_candidates(two.p, int(x1), int(x2), int(n), seed=int(seed))
    st.plotly_chart(toy_sim_figure(V, sim2["counts"], two.p, L), key="toy_two_sim", config={"displaylogo": False})
    st.caption(tr("toy.sim_result", n=int(n), a=sim2["accepted_first"] + sim2["accepted_second"],
                  alpha=two.a1 + (1 - two.a1) * two.a2, tv=toy.tv_distance(sim2["counts"], two.p)))
