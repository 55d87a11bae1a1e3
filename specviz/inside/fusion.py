"""EAGLE-3 fuses three of the target's layers; a logit lens shows what each of them "says".

The head reads the inputs of a low, a middle and a high layer (`ModelConfig.eagle3_layers`), joins
them (3H) and maps them to H with one fc. Pushing each tap through the target's final norm and LM
head (the logit lens) shows why: the top of the network is already sharp on the next token, the
lower taps still carry the context; the draft needs to reach further than the next token.
"""
from __future__ import annotations

import torch

from .states import cosine, greedy_continue, next_probs, target_states, top


@torch.no_grad()
def logit_lens(model, tok, head, ids: list[int], k: int = 5) -> dict:
    """At the prompt's last position: each tap's lens (top k, and the probability it gives the
    target's next token), the target's own next token, and the fused head's draft for the token
    after it beside the target's choice there."""
    layers = tuple(model.cfg.eagle3_layers())
    st = target_states(model, ids, taps=layers + ("final",))
    g1, g2 = greedy_continue(model, ids, 2)
    taps = []
    for name, key in zip(("low", "mid", "high"), layers):
        x = st[key][-1]
        lens = next_probs(model, model.final_norm(x.to(model.dtype)))
        taps.append(dict(tap=name, layer=int(key), top=top(lens, tok, k), p_next=round(float(lens[g1]), 4),
                         cos_to_final=cosine(x, st["final"][-1])))
    final = next_probs(model, st["final"][-1])
    out = dict(layers=list(layers), n_layers=model.cfg.n_layers, hidden=model.cfg.hidden_size, taps=taps,
               final=dict(top=top(final, tok, k), p_next=round(float(final[g1]), 4)),
               next_token=g1, next_text=tok.token_text(g1), after_next=g2, after_next_text=tok.token_text(g2))
    if head is not None:
        dev, dt = head.fc.weight.device, head.fc.weight.dtype
        g = head.fuse(*(st[key][None].to(dev, dt) for key in layers))
        T = len(ids)
        written = head.forward_seq(torch.tensor([ids[1:] + [g1]], device=dev), g, torch.arange(T, device=dev)[None])
        logits = head.logits(written[0, -1:]).float()[0]
        q = torch.softmax(logits, -1)
        v, i = q.topk(k)
        ids_t = head.draft_to_target(i)
        out["head"] = dict(top=[[int(t), tok.token_text(int(t)), round(float(p), 4)] for p, t in zip(v, ids_t)],
                           right=int(ids_t[0]) == g2)
    return out
