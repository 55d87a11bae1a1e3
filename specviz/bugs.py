"""The bug zoo: plausible mistakes in speculative verification, each a small named function.

Every variant swaps exactly one piece of the correct rule in :mod:`specviz.verify` (see
:class:`specviz.verify.Policy`) and is selected with ``verify(..., variant=NAME)``, the engine's
``variant`` and ``python -m specviz.lossless --broken NAME``. :data:`BUGS` holds the app page's
bilingual explanations; :data:`DEFAULT_BROKEN` is the negative control of a bare ``--broken``.

Which trees a variant touches: greedy-draft only deterministic drafts (top-k/argmax/PLD) at
temperature > 0; raw-logit-q and scalar-residual only drawn drafts (SpS chain, SpecInfer tree);
the others every tree at temperature > 0 (no-rejection also greedy).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from .verify import CORRECT, Policy, residual_correct

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

# ---------------------------------------------------------------------------- explanations
BUGS: dict[str, dict[str, str]] = {
    "unwarped-bonus": {
        "title_en": "Bonus token from the raw logits",
        "title_zh": "附加 token 取自未处理的 logits",
        "explain_en": (
            "When every draft token is accepted, the target adds one bonus token. This bug draws it "
            "from softmax(raw logits) instead of the distribution after temperature, top-k and top-p. "
            "With temperature below 1 or a top-k/top-p cut, the raw distribution is flatter: tokens "
            "that warping shrinks or removes (the long tail) appear where vanilla sampling would never "
            "produce them, and the most likely tokens are under-produced. It only strikes right after a "
            "fully accepted path, so the better the drafter, the larger the bias; at temperature 1 "
            "without top-k/top-p it is invisible. The public EAGLE code once had exactly this bug."
        ),
        "explain_zh": (
            "当所有草稿 token 都被接受时，目标模型会额外给出一个附加 token。这个错误从原始 logits 的 "
            "softmax 中抽取它，而不是从经过 temperature、top-k、top-p 处理后的分布中抽取。当温度低于 1 "
            "或启用了 top-k/top-p 截断时，原始分布更平坦：本应被压低或剪掉的长尾 token 会出现，而最可能"
            "的 token 则被少产出。它只在整条路径被完全接受之后发生，所以草稿模型越好，偏差越大；在温度为 "
            "1 且不使用 top-k/top-p 时则看不出来。公开的 EAGLE 代码曾经就有这个错误。"
        ),
        "visible_when": "temperature != 1 or top-k/top-p active; only after a fully accepted path",
        "visible_when_zh": "温度不等于 1 或启用 top-k/top-p；只在整条路径被接受之后",
    },
    "greedy-draft": {
        "title_en": "Argmax drafts verified as if they were sampled",
        "title_zh": "把 argmax 草稿当作随机抽样来验证",
        "explain_en": (
            "The drafter picks its tokens deterministically (argmax or top-k), but verification uses "
            "the rule for sampled drafts, min(1, p/q) with q the draft's softmax, and the residual "
            "max(p - q, 0). That rule assumes the token was drawn with probability q(x); an argmax is "
            "proposed every time. The draft's top choice is accepted with probability min(1, p/q), "
            "which exceeds p whenever q < 1, so it is over-produced (always emitted when p >= q), "
            "while tokens that the draft rates above the target are cut from the residual and "
            "under-produced. The correct rule for deterministic drafts accepts x with probability p(x)."
        ),
        "explain_zh": (
            "草稿模型用确定性方式（argmax 或 top-k）选出 token，但验证时却用了随机草稿的规则："
            "以 min(1, p/q) 接受（q 为草稿的 softmax），拒绝后从 max(p - q, 0) 重采样。这个规则假设 "
            "token 是以概率 q(x) 抽出来的，而 argmax 每次都会被提出。于是草稿的首选以 min(1, p/q) 被接受，"
            "只要 q < 1 这个概率就大于 p，因此它被多产出（当 p >= q 时每次都会输出），而草稿评分高于目标模型"
            "的其他 token 被从残差中剪掉，产出偏少。确定性草稿的正确规则是以概率 p(x) 接受 x。"
        ),
        "visible_when": "deterministic drafts (top-k, argmax, prompt lookup) at temperature > 0",
        "visible_when_zh": "确定性草稿（top-k、argmax、提示查找）且温度 > 0",
    },
    "raw-logit-q": {
        "title_en": "q from the draft's unprocessed logits",
        "title_zh": "q 取自草稿未处理的 logits",
        "explain_en": (
            "The draft token was sampled from the draft's processed distribution (temperature, top-k, "
            "top-p), but the ratio p/q and the residual use the draft's raw softmax. At temperature "
            "below 1 the raw probability of a likely token is smaller than the processed one, so p/q "
            "is too large and the draft's favourite tokens are accepted too often (over-produced); the "
            "residual max(p - q_raw, 0) then keeps mass on tokens the draft already covered while the "
            "rest of the distribution is under-produced. Both p and q must be warped identically. "
            "Invisible at temperature 1 without top-k/top-p."
        ),
        "explain_zh": (
            "草稿 token 是从草稿处理后的分布（temperature、top-k、top-p）中抽出的，但计算 p/q 和残差时却"
            "用了草稿原始的 softmax。温度低于 1 时，高概率 token 的原始概率比处理后的小，p/q 偏大，草稿"
            "偏爱的 token 被过多接受（多产出）；残差 max(p - q_raw, 0) 又在草稿已经照顾过的 token 上留下"
            "概率，其余部分则产出偏少。p 和 q 必须以相同方式处理。温度为 1 且不使用 top-k/top-p 时看不出来。"
        ),
        "visible_when": "sampled drafts (SpS chain, SpecInfer tree) with temperature != 1 or top-k/top-p",
        "visible_when_zh": "随机抽样的草稿（SpS 链、SpecInfer 树），且温度不等于 1 或启用 top-k/top-p",
    },
    "scalar-residual": {
        "title_en": "Residual with the scalar q(x)",
        "title_zh": "残差中减去的是标量 q(x)",
        "explain_en": (
            "After rejecting x the correct residual is norm(max(p - q, 0)) with the whole draft "
            "distribution q. This bug subtracts the single number q(x) from every entry. Tokens the "
            "draft also proposes are no longer discounted, so the probability they already received "
            "through acceptance is paid out a second time: tokens the draft likes are over-produced. "
            "Meanwhile every token whose p is below q(x) drops out of the residual entirely, so the "
            "tail of the target distribution is under-produced."
        ),
        "explain_zh": (
            "拒绝 x 之后，正确的残差是 norm(max(p - q, 0))，减去的是整个草稿分布 q。这个错误从每个位置"
            "减去同一个数 q(x)。草稿同样会提出的 token 不再被扣除，它们通过接受已经得到的概率又被发放了一次："
            "草稿偏爱的 token 被多产出。同时，所有 p 小于 q(x) 的 token 都从残差中消失，目标分布的长尾被少产出。"
        ),
        "visible_when": "sampled drafts (SpS chain, SpecInfer tree) at temperature > 0, after a rejection",
        "visible_when_zh": "随机抽样的草稿（SpS 链、SpecInfer 树），温度 > 0，发生拒绝之后",
    },
    "resample-from-p": {
        "title_en": "Resampling from p instead of the residual",
        "title_zh": "拒绝后从 p 而不是残差中重采样",
        "explain_en": (
            "After a rejection the extra token must come from the residual, the part of p the draft "
            "did not already cover. Drawing it from p itself pays twice for tokens the draft proposes "
            "often: they were emitted through acceptance and can be drawn again, so tokens with "
            "q >= p (the draft's favourites) are over-produced and tokens the draft under-proposes "
            "(p > q) are under-produced. This is the classic mistake and the default negative control "
            "of the losslessness check."
        ),
        "explain_zh": (
            "拒绝之后，额外的 token 必须来自残差，也就是草稿没有覆盖到的那部分 p。直接从 p 抽取，会让草稿"
            "经常提出的 token 得到双份概率：它们已经通过接受被输出，又可能再次被抽中。于是 q >= p 的 token"
            "（草稿偏爱的）被多产出，草稿提得少的 token（p > q）被少产出。这是最经典的错误，也是无损检验"
            "默认的反例。"
        ),
        "visible_when": "any draft at temperature > 0, after a rejection",
        "visible_when_zh": "任何草稿，温度 > 0，发生拒绝之后",
    },
    "no-rejection": {
        "title_en": "Accepting every draft token",
        "title_zh": "接受所有草稿 token",
        "explain_en": (
            "Every draft token is accepted without a test, so the output follows the drafter, not the "
            "target: whatever the drafter likes is over-produced and whatever it misses is "
            "under-produced (only the bonus token after each path comes from the target). The "
            "acceptance length looks perfect, which is exactly why speed alone proves nothing."
        ),
        "explain_zh": (
            "所有草稿 token 不经检验就被接受，输出服从草稿模型而不是目标模型：草稿偏爱的被多产出，草稿忽略的"
            "被少产出（只有每条路径之后的附加 token 来自目标模型）。接受长度看起来完美，这正说明只看速度"
            "什么也证明不了。"
        ),
        "visible_when": "always, whenever the drafter differs from the target (also greedy)",
        "visible_when_zh": "只要草稿与目标模型不同就会出现（贪心解码也是）",
    },
}


def explain(name: str, lang: str = "en") -> dict[str, str]:
    """Title, explanation and visibility condition of a bug in one language ("en" or "zh")."""
    b = BUGS[name]
    if lang == "zh":
        return {"title": b["title_zh"], "explain": b["explain_zh"], "visible_when": b["visible_when_zh"]}
    return {"title": b["title_en"], "explain": b["explain_en"], "visible_when": b["visible_when"]}
