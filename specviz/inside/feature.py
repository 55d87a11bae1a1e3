"""EAGLE-1 drafts features, not tokens: what each draft step reads and writes, on a real prompt.

Step 1 reads the target's own last feature f and the token the target just chose (the *shifted*
token: one step ahead of f); it writes a predicted feature, which the target's LM head turns into
q. Step k > 1 reads the head's own feature from step k - 1 and the token it drafted there. The
uncertainty argument: the same f is followed by different features depending on which token was
sampled, so a head that reads f alone must draft the same thing for both.
"""
from __future__ import annotations

import torch

from .states import cosine, greedy_continue, next_probs, target_states, top

STRIP = 32  # feature dimensions drawn as a strip (of H)


@torch.no_grad()
def _head_out(head, feats: torch.Tensor, tokens: list[int]) -> torch.Tensor:
    """The head over a whole sequence (features [T, H], the token after each): its output at every index."""
    T = len(tokens)
    dev = head.fc.weight.device
    out = head.forward_seq(torch.tensor([tokens], device=dev), feats[None].to(dev, head.fc.weight.dtype),
                           torch.arange(T, device=dev)[None])
    return out[0].float()


@torch.no_grad()
def feature_chain(model, tok, head, ids: list[int], steps: int = 4, k: int = 5) -> dict:
    """A greedy chain of `steps` draft steps after prompt `ids`, each with its inputs and outputs.

    Each step says which feature it read ("target" for step 1, else the head's previous output),
    the token beside it, the feature it wrote (first STRIP dimensions), q's top k through the
    target's LM head, the drafted token, the target's own greedy token there, and the cosine of the
    written feature with the target's true feature at that position (while the chain still follows
    the target's tokens; after a wrong draft the contexts differ and there is no true feature)."""
    truth = greedy_continue(model, ids, steps + 1)  # g1 (the root the target chose), g2, ...
    full = ids + truth
    f_true = target_states(model, full)["final"]  # f_true[i]: the state after token i
    n = len(ids)
    feats = f_true[:n].clone()  # step 1 reads the target's features up to the prompt's last token
    toks = ids[1:] + [truth[0]]  # the token after each feature (shifted one ahead)
    out_steps, on_track = [], True
    for s in range(1, steps + 1):
        out = _head_out(head, feats, toks)
        written = out[-1]
        q = torch.softmax(head.logits(written[None]).float()[0], -1)
        drafted = int(q.argmax())
        pos = n - 1 + s  # the written feature predicts the state after token index pos
        target_tok = truth[s]
        out_steps.append(dict(
            step=s, reads="target" if s == 1 else "head", feature_in=[round(float(x), 4) for x in feats[-1][:STRIP]],
            token_in=toks[-1], token_in_text=tok.token_text(toks[-1]),
            feature_out=[round(float(x), 4) for x in written[:STRIP]],
            cos_to_target=cosine(written, f_true[pos]) if on_track else None,
            q_top=top(q, tok, k), drafted=drafted, drafted_text=tok.token_text(drafted),
            target_token=target_tok, target_text=tok.token_text(target_tok)))
        on_track = on_track and drafted == target_tok
        feats = torch.cat([feats, written[None]])
        toks = toks + [drafted]
    return dict(prompt_tokens=n, root=truth[0], root_text=tok.token_text(truth[0]), steps=out_steps, strip=STRIP)


def uncertain_position(model, ids: list[int], search: int = 24, below: float = 0.6) -> list[int]:
    """The prompt extended by greedy tokens up to the first position whose next-token top-1
    probability is below `below` (where sampling really can go two ways); `ids` if none within `search`."""
    cont = greedy_continue(model, ids, search)
    finals = target_states(model, ids + cont)["final"]
    probs = next_probs(model, finals[len(ids) - 1:])
    for j in range(len(cont)):
        if float(probs[j].max()) < below:
            return ids + cont[:j]
    return list(ids)


@torch.no_grad()
def uncertainty(model, tok, heads: dict, ids: list[int], temperature: float = 1.0, seeds=range(64), k: int = 5) -> dict:
    """Two different tokens sampled after the same feature, and what follows each.

    `heads`: {"with_token": head, "without_token": head or None} (the ablation pair when trained here).
    For each of the two branches: the target's true next feature and its next tokens, and each head's
    draft after the branch's token. The head without the token reads the same input for both branches,
    so it drafts the same q for both."""
    f = target_states(model, ids)["final"]
    p = next_probs(model, f[-1], temperature)
    draws = []
    for seed in seeds:
        g = torch.Generator().manual_seed(int(seed))
        t = int(torch.multinomial(p.cpu(), 1, generator=g))
        draws.append(dict(seed=int(seed), token=t, text=tok.token_text(t)))
        if len({d["token"] for d in draws}) == 2:
            break
    first = draws[0]["token"]
    second = next(d["token"] for d in draws if d["token"] != first) if len({d["token"] for d in draws}) == 2 else None
    branches, true_feats = [], []
    for t in [x for x in (first, second) if x is not None]:
        f_next = target_states(model, ids + [t])["final"][-1]
        true_feats.append(f_next)
        b = dict(token=t, text=tok.token_text(t), p=round(float(p[t]), 4),
                 target_next=top(next_probs(model, f_next), tok, k))
        for name, head in heads.items():
            if head is None:
                continue
            written = _head_out(head, f, ids[1:] + [t])[-1]
            q = torch.softmax(head.logits(written[None]).float()[0], -1)
            b[name] = dict(q_top=top(q, tok, k), cos_to_target=cosine(written, f_next))
        branches.append(b)
    return dict(prompt_tokens=len(ids), temperature=temperature, p_top=top(p, tok, k), draws=draws, branches=branches,
                features_cos=cosine(true_feats[0], true_feats[1]) if len(true_feats) == 2 else None)
