"""Inside the drafter: the data behind each view (real heads on the real target, toy trees where the
algorithm is the point), the recorded file, and the figures drawn from changed data."""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch

from specviz.core.tree_build import build_dynamic_tree
from specviz.inside import expansion, feature, fusion, ttt, vocab
from specviz.inside.record import OUT as RECORDING
from specviz.viz import inside as V


def _toy_expand(V_, seed=0):
    memo = {}

    def row(path):
        if path not in memo:
            g = torch.Generator().manual_seed(hash((seed,) + path) % (2**31))
            memo[path] = (torch.randn(V_, generator=g) * 2).softmax(-1)
        return memo[path]

    def expand(tree, nodes):
        out = []
        for i in nodes:
            path, j = [], i
            while j > 0:
                path.append(tree.tokens[j])
                j = tree.parents[j]
            out.append(row(tuple(reversed(path))))
        return torch.stack(out)

    return expand


# ------------------------------------------------------------------------------ EAGLE-2 levels
@pytest.mark.parametrize("depth,top_k,total", [(3, 4, 10), (5, 8, 24), (2, 3, 4)])
def test_levels_account_for_every_candidate_and_the_kept_ones_are_the_tree(depth, top_k, total):
    tree = build_dynamic_tree(0, _toy_expand(12), depth, top_k, total)
    lv = expansion.levels(tree.candidates, total)
    flat = [c for level in lv for c in level]
    assert len(flat) == len(tree.candidates) - 1
    assert len(lv) == depth
    kept = [c for c in flat if c["kept"]]
    assert len(kept) == len(tree) - 1
    # the kept candidates are the tree's nodes: same tokens under the same path scores
    assert sorted((c["token"], round(c["score"], 4)) for c in kept) == sorted(
        (tree.tokens[i], round(tree.scores[i], 4)) for i in range(1, len(tree)))
    ids = {c["id"]: c for c in flat}
    for c in kept:  # closed under parents
        assert c["parent"] == 0 or ids[c["parent"]]["kept"]
    children = {c["parent"] for c in flat}
    assert all(c["expanded"] == (c["id"] in children) for c in flat)
    assert not any(c["expanded"] for c in lv[-1])  # the last level is scored, never expanded
    for level in lv:  # best first, and q is the step from the parent's score
        assert [c["score"] for c in level] == sorted((c["score"] for c in level), reverse=True)
        for c in level:
            parent_score = 0.0 if c["parent"] == 0 else ids[c["parent"]]["score"]
            assert c["q"] == pytest.approx(math.exp(c["score"] - parent_score), abs=2e-4)
    summ = expansion.summary(lv)
    assert [s["scored"] for s in summ] == [len(x) for x in lv] and sum(s["kept"] for s in summ) == total - 1


# ------------------------------------------------------------------------------ calibration
def _trace(nodes, T=0.0):
    return {"sampling": {"temperature": T}, "nodes": nodes}


def _node(i, parent, q, p, score, copied=False):
    return {"id": i, "parent": parent, "q": q, "p": p, "score": score, "copied": copied}


def test_calibration_bins_count_every_drafted_node_and_its_verdict():
    nodes = [_node(0, -1, None, None, 0.0), _node(1, 0, 0.95, 1.0, math.log(0.95)), _node(2, 0, 0.04, 0.0, math.log(0.04)),
             _node(3, 1, 0.55, 0.0, math.log(0.95 * 0.55)), _node(4, 2, 0.91, 1.0, math.log(0.04 * 0.91)),
             _node(5, 1, 0.3, 1.0, math.log(0.95 * 0.3), copied=True)]
    sampled = _trace([_node(0, -1, None, None, 0.0), _node(1, 0, 0.5, 0.4, math.log(0.5))], T=0.8)
    cal = expansion.calibration([_trace(nodes), sampled])
    assert cal["rounds"] == 1 and cal["nodes"] == 4  # the copied node and the sampled round left out
    tok = {(b["lo"], b["count"], b["accepted"]) for b in cal["token"] if b["count"]}
    assert tok == {(0.9, 2, 2), (0.0, 1, 0), (0.5, 1, 0)}
    # per path: node 4 is the target's choice but its parent is not, so its path is not accepted
    path = {round(b["lo"], 1): (b["count"], b["accepted"]) for b in cal["path"] if b["count"]}
    assert path == {0.9: (1, 1), 0.0: (2, 0), 0.5: (1, 0)}
    assert sum(b["count"] for b in cal["token"]) == cal["nodes"]


def test_calibration_of_a_recorded_lesson_round_matches_its_trace():
    from specviz.teaching import lesson as LS

    tr = LS.load_round("eagle2-greedy").trace.to_dict()
    cal = expansion.calibration([tr])
    drafted = [n for n in tr["nodes"][1:]]
    assert cal["nodes"] == len(drafted)
    assert sum(b["accepted"] for b in cal["token"]) == sum(n["p"] >= 1.0 for n in drafted)
    # every node of the accepted path has an accepted path, and no node off it that was tried does
    assert sum(b["accepted"] for b in cal["path"]) >= len(tr["accepted_nodes"])


# ------------------------------------------------------------------------------ training-time test mask
def test_ttt_mask_is_the_mask_attend_ttt_applies():
    """With q = k = 0 the attention is a plain mean over what a query may see; comparing attend_ttt's
    output with the mean taken under ttt_mask checks every cell."""
    from specviz.heads.eagle import Eagle3Head, head_config_from_target
    from specviz.runtime.config import ModelConfig

    cfg = ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=64, n_layers=6, n_heads=2, n_kv_heads=2,
                      head_dim=16, rope_theta=10000.0, tie_embeddings=True, eos_token_ids=(1,))
    attn = Eagle3Head(head_config_from_target(cfg, draft_vocab_size=64)).midlayer.self_attn
    T, S = 4, 3
    g = torch.Generator().manual_seed(0)
    vs = [torch.randn(1, 2, T, 16, generator=g) for _ in range(S)]
    ks = [torch.zeros(1, 2, T, 16) for _ in range(S)]
    mask = torch.tensor(ttt.ttt_mask(T, S), dtype=torch.float)
    allv = torch.cat(vs, dim=2)  # step-major, like the mask's columns
    with torch.no_grad():
        for j in range(S):
            got = attn.attend_ttt(torch.zeros(1, 2, T, 16), ks[: j + 1], vs[: j + 1])
            rows = mask[j * T : (j + 1) * T]
            assert not rows[:, (j + 1) * T :].any()  # no key of a later step
            want = attn.out((rows / rows.sum(-1, keepdim=True)) @ allv)
            assert torch.allclose(got, want, atol=1e-5), j
    assert ttt.ttt_mask(2, 2) == [[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]]


# ------------------------------------------------------------------------------ real heads on the real target
@pytest.fixture(scope="module")
def heads(target):
    from specviz.drafters.eagle import shared_head

    return shared_head(target, "eagle1")[0], shared_head(target, "eagle3")[0]


PROMPT = "Write a Python function that returns the sum of a list of numbers."


def test_feature_chain_reads_the_targets_feature_then_its_own(target, heads):
    m, tok = target.model, target.tokenizer
    ids = tok.safe_chat_ids(PROMPT)
    fc = feature.feature_chain(m, tok, heads[0], ids, steps=4)
    steps = fc["steps"]
    assert [s["reads"] for s in steps] == ["target", "head", "head", "head"]
    assert steps[0]["token_in"] == fc["root"]  # the shifted token: the target's own choice after the prompt
    for a, b in zip(steps, steps[1:]):  # step k + 1 reads what step k wrote and drafted
        assert b["feature_in"] == a["feature_out"] and b["token_in"] == a["drafted"]
    for s in steps:
        assert s["drafted"] == s["q_top"][0][0] and 0 < s["q_top"][0][2] <= 1
        assert sum(x[2] for x in s["q_top"]) <= 1.0001
    # cosine only while the chain follows the target; it starts high (the head's job) and stays a cosine
    on = [s for s in steps if s["cos_to_target"] is not None]
    assert on[0] is steps[0] and steps[0]["cos_to_target"] > 0.5
    for a, b in zip(steps, steps[1:]):
        if a["drafted"] != a["target_token"]:
            assert b["cos_to_target"] is None
    # step 1's input is the target's real last prompt feature
    from specviz.inside.states import target_states
    f = target_states(m, ids)["final"][-1]
    assert steps[0]["feature_in"] == [round(float(x), 4) for x in f[: fc["strip"]]]


def test_uncertainty_branches_differ_and_a_head_without_the_token_cannot_tell_them_apart(target, heads):
    m, tok = target.model, target.tokenizer
    ids = tok.safe_chat_ids("Write a haiku about autumn leaves.")
    u = feature.uncertainty(m, tok, {"with_token": heads[0], "without_token": heads[0]}, ids)
    assert len(u["branches"]) == 2 and u["branches"][0]["token"] != u["branches"][1]["token"]
    assert [d["token"] for d in u["draws"]][-1] == u["branches"][1]["token"]
    assert u["features_cos"] < 0.999  # different tokens, different next features
    # the shipped head fed zeros for the token would read the same input in both branches
    from specviz.heads.eagle import Eagle1Head

    blind = Eagle1Head(dict(heads[0].config, specviz=dict(heads[0].config.get("specviz") or {}, token_input=False)))
    blind.load_state_dict(heads[0].state_dict())
    blind.bind(m.embed, m.embed if m.cfg.tie_embeddings else m.lm_head)
    u2 = feature.uncertainty(m, tok, {"with_token": heads[0], "without_token": blind}, ids)
    a, b = u2["branches"]
    assert a["without_token"]["q_top"] == b["without_token"]["q_top"]
    assert a["with_token"]["q_top"] != b["with_token"]["q_top"]


def test_logit_lens_final_tap_is_the_targets_distribution(target, heads):
    from specviz.inside.states import next_probs, target_states, top

    m, tok = target.model, target.tokenizer
    ids = tok.safe_chat_ids(PROMPT)
    fl = fusion.logit_lens(m, tok, heads[1], ids)
    assert fl["layers"] == list(m.cfg.eagle3_layers()) and [x["tap"] for x in fl["taps"]] == ["low", "mid", "high"]
    p = next_probs(m, target_states(m, ids)["final"][-1])
    assert fl["final"]["top"] == top(p, tok, 5) and fl["next_token"] == int(p.argmax())
    assert fl["final"]["p_next"] == fl["final"]["top"][0][2]
    ids_t = [x[0] for x in fl["head"]["top"]]
    assert all(bool(heads[1].t2d[i]) for i in ids_t)  # the head drafts only inside its vocabulary
    assert fl["head"]["right"] == (ids_t[0] == fl["after_next"])


def test_vocab_coverage_counts_outside_tokens_and_the_lookup_copies(target, heads):
    e3 = heads[1]
    inside = e3.target_ids()[:3].tolist()
    outside = (~e3.t2d).nonzero()[:2, 0].tolist()
    a, b, c = inside
    x, y = outside
    # the answer repeats "a b x": the second x follows the 2-gram "a b" seen before, so lookup copies it
    prompt = [c, c]
    answer = [a, b, x, c, a, b, x, y]
    v = vocab.coverage(e3, [(prompt, answer)], target.tokenizer.token_text)
    assert v["answer_tokens"] == 8 and v["outside"] == 3
    assert v["earlier_in_context"] == 1 and v["copied_by_lookup"] == 1
    assert v["commonest_outside"][0][:1] == [x] and v["commonest_outside"][0][2] == 2
    for i, d, tid, _ in v["d2t_rows"]:
        assert i + d == tid and bool(e3.t2d[tid])


# ------------------------------------------------------------------------------ the recording and the figures
def test_the_recording_is_complete_and_its_calibration_counts_add_up():
    rec = json.loads(RECORDING.read_text())
    for key in ("feature", "uncertainty", "expansion", "fusion", "vocab", "calibration", "recorded"):
        assert key in rec, key
    for m in ("eagle2", "eagle3"):
        cal = rec["calibration"][m]
        assert sum(b["count"] for b in cal["token"]) == sum(b["count"] for b in cal["path"]) == cal["nodes"] > 500
        assert cal["rounds"] > 100
    assert rec["recorded"]["heads"] and rec["recorded"]["cpu"]


def _fig_ys(fig):
    return [list(tr.y) for tr in fig.data if getattr(tr, "y", None) is not None]


def test_figures_follow_the_data():
    rec = json.loads(RECORDING.read_text())
    changed = copy.deepcopy(rec)
    changed["feature"]["steps"][0]["feature_out"][0] += 1.0
    assert V.feature_strips(rec["feature"]).data[0].z != V.feature_strips(changed["feature"]).data[0].z
    changed["calibration"]["eagle3"]["token"][9]["rate"] = 0.123
    changed["calibration"]["eagle3"]["token"][9]["count"] = 99
    assert _fig_ys(V.calibration_figure(rec["calibration"])) != _fig_ys(V.calibration_figure(changed["calibration"]))
    lv = changed["expansion"]["levels"]
    lv[0][0]["kept"] = False
    kept = lambda f: [len(t.x) for t in f.data if t.name == "kept in the final tree"]  # noqa: E731
    assert kept(V.expansion_figure(rec["expansion"]["levels"])) != kept(V.expansion_figure(lv))
    changed["fusion"]["taps"][0]["p_next"] = 0.77
    assert _fig_ys(V.lens_figure(rec["fusion"])) != _fig_ys(V.lens_figure(changed["fusion"]))
    changed["vocab"]["copied_by_lookup"] += 5
    assert [t.x for t in V.vocab_figure(rec["vocab"]).data] != [t.x for t in V.vocab_figure(changed["vocab"]).data]
    dot = V.fusion_dot(rec["fusion"])
    assert all(f"layer {n}" in dot for n in rec["fusion"]["layers"]) and f"{3 * rec['fusion']['hidden']}" in dot


def _abl(w, wo, n=5000):
    def arm(name, tau):
        extra = tau - 1
        chain = [min(extra, 0.9)] + [max(extra - 0.9, 0) / 5] * 5
        return dict(arm=name, idea=name, steps=10, wall_minutes=1.0, init={"sha256": "x"},
                    heldout=dict(acc=[0.5] * 6, chain=chain, tau_chain=round(1 + sum(chain), 4), anchors=n))
    return dict(pairs={"token": ["a", "b"]}, arms={"a": arm("a", w), "b": arm("b", wo)})


def test_pair_verdict_uses_the_standard_error_of_tau():
    assert V.pair_verdict(_abl(1.9, 1.5), "token")["verdict"] == "holds"
    assert V.pair_verdict(_abl(1.5, 1.9), "token")["verdict"] == "reversed"
    assert V.pair_verdict(_abl(1.90, 1.89), "token")["verdict"] == "tie"
    big = V.pair_verdict(_abl(1.90, 1.89, n=10_000_000), "token")  # more positions, smaller error
    assert big["verdict"] == "holds" and big["eps"] < V.pair_verdict(_abl(1.90, 1.89), "token")["eps"]
    assert V.pair_verdict({"pairs": {"token": ["a", "b"]}, "arms": {}}, "token") is None
    fig = V.ablation_figure(_abl(1.9, 1.5))
    assert [list(t.y) for t in fig.data] == [[1.9], [1.5]]
    half = _abl(1.9, 1.5)
    half["pairs"]["ttt"] = ["a", "not-trained"]  # a pair with an arm missing is not drawn half
    assert [list(t.y) for t in V.ablation_figure(half).data] == [[1.9], [1.5]]
