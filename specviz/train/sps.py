"""The SpS draft model: a small independent Llama sharing the target's tokenizer, distilled.

Architecture: a few Llama layers of width `hidden` with tied embeddings. The embedding starts
as the target's embedding projected on its top principal directions (so token geometry is
inherited), then everything is trained on the target's top-k soft labels of the regenerated
responses. Saved as a plain Hugging Face checkpoint (config.json + model.safetensors,
`LlamaForCausalLM`), so it can also serve as `assistant_model` in HF assisted generation, and
SpecViz's own runtime loads it like any Llama.
"""

from __future__ import annotations

import json
import math
import random
import shutil
import time
from pathlib import Path

import torch
from safetensors.torch import save_file
from tqdm import tqdm

from ..core.target import load_target
from .data import SeqData
from .batches import batches
from .trainers import resume


def sps_config(tcfg, hidden=256, layers=2, heads=4, kv_heads=2, inter=768) -> dict:
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
        "intermediate_size": inter, "num_hidden_layers": layers, "num_attention_heads": heads,
        "num_key_value_heads": kv_heads, "head_dim": hidden // heads, "rms_norm_eps": tcfg.rms_eps,
        "rope_theta": tcfg.rope_theta, "max_position_embeddings": tcfg.max_position, "vocab_size": tcfg.vocab_size,
        "tie_word_embeddings": True, "bos_token_id": tcfg.bos_token_id,
        "eos_token_id": list(tcfg.eos_token_ids) if len(tcfg.eos_token_ids) > 1 else (tcfg.eos_token_ids[0] if tcfg.eos_token_ids else None),
        "hidden_act": "silu", "attention_bias": False, "mlp_bias": False, "torch_dtype": "float32",
    }


def build_sps(tcfg, target_embed: torch.Tensor, **kw):
    from transformers import LlamaConfig, LlamaForCausalLM  # slow to import; only SpS training needs it

    d = sps_config(tcfg, **kw)
    model = LlamaForCausalLM(LlamaConfig(**{k: v for k, v in d.items() if k not in ("architectures", "torch_dtype")}))
    E = target_embed.float()
    mu = E.mean(0, keepdim=True)
    _, _, Vh = torch.linalg.svd(E - mu, full_matrices=False)
    proj = (E - mu) @ Vh[: d["hidden_size"]].T
    proj = proj / proj.std() * 0.02 * 20  # keep a sane scale for the tied head
    with torch.no_grad():
        model.model.embed_tokens.weight.copy_(proj)
    return model, d


def soft_labels_dense(seqs, device):
    """Padded batch: input ids [B, T], label ids/probs [B, T, K] at response positions, mask [B, T]."""
    B = len(seqs)
    T = max(len(s["tokens"]) for s in seqs)
    K = seqs[0]["topk_ids"].shape[1]
    ids = torch.zeros(B, T, dtype=torch.long)
    lab = torch.zeros(B, T, K, dtype=torch.long)
    lp = torch.full((B, T, K), -float("inf"))
    valid = torch.zeros(B, T, dtype=torch.bool)
    att = torch.zeros(B, T, dtype=torch.long)
    for b, s in enumerate(seqs):
        n, P, m = len(s["tokens"]), s["prompt_len"], s["topk_ids"].shape[0]
        ids[b, :n] = s["tokens"]
        att[b, :n] = 1
        lab[b, P - 1 : P - 1 + m] = s["topk_ids"]
        lp[b, P - 1 : P - 1 + m] = s["topk_logp"]
        valid[b, P - 1 : P - 1 + m] = True
    p = lp.exp()
    p = p / p.sum(-1, keepdim=True).clamp(min=1e-12)
    return ids.to(device), att.to(device), lab.to(device), p.nan_to_num(0).to(device), valid.to(device)


@torch.no_grad()
def evaluate_sps(model, data: SeqData, steps=6, greedy_only=True, device="cpu"):
    model.eval()
    seqs = [s for s in data.seqs if s.get("temp", 0.0) == 0.0 or not greedy_only]
    right = torch.zeros(steps)
    chain = torch.zeros(steps)
    count = torch.zeros(steps)
    anchors = 0
    for s in seqs:
        ids, att, lab, p, valid = soft_labels_dense([s], device)
        logits = model(input_ids=ids, attention_mask=att).logits[0]
        ok = (logits.argmax(-1) == lab[0, :, 0]) & valid[0]
        v = valid[0]
        T = ok.shape[0]
        # anchor t: drafts for positions t, t+1, ... (each conditioned on the true prefix == the drafts if right)
        run = torch.ones(T, dtype=torch.bool)
        for j in range(steps):
            okj = torch.zeros(T, dtype=torch.bool)
            vj = torch.zeros(T, dtype=torch.bool)
            if j < T:
                okj[: T - j] = ok[j:]
                vj[: T - j] = v[j:]
            run &= okj
            right[j] += float((okj & v).sum())
            chain[j] += float((run & v).sum())
            count[j] += float((vj & v).sum())
        anchors += int(v.sum())
    acc = (right / count.clamp(min=1)).tolist()
    ch = (chain / max(anchors, 1)).tolist()
    return {"acc": [round(x, 4) for x in acc], "chain": [round(x, 4) for x in ch], "tau_chain": round(1 + sum(ch), 3),
            "anchors": anchors, "sequences": len(seqs)}


def train_sps(data_dir, out, ckpt_dir, minutes=10.0, max_steps=0, lr=2e-3, max_tokens=4096, device="cpu",
              model=None, log=print, seed=0, hidden=256, layers=2, max_shards=0):
    torch.manual_seed(seed)
    if model is None:
        tg = load_target(dtype=torch.float32, device="cpu")
        model, folder = tg.model, tg.folder
    else:
        folder = None
    tcfg = model.cfg
    data = SeqData(data_dir, "train", taps=[], max_shards=max_shards or None)
    held = SeqData(data_dir, "heldout", taps=[], max_shards=max_shards or None)
    heads = max(1, hidden // 64)
    kv = max(1, heads // 2)
    sps, d = build_sps(tcfg, model.embed, hidden=hidden, layers=layers, heads=heads, kv_heads=kv, inter=3 * hidden)
    sps.to(device)
    opt = torch.optim.AdamW(sps.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
    ckdir = Path(ckpt_dir)
    ckdir.mkdir(parents=True, exist_ok=True)
    ck_path = ckdir / "last.pt"
    state = resume(ck_path, sps, opt, "model", device, log)
    budget = minutes * 60

    def lr_at():
        frac = state["step"] / max_steps if max_steps else state["elapsed"] / budget
        warm = min(1.0, (state["step"] + 1) / 30)
        return lr * warm * (0.1 + 0.45 * (1 + math.cos(math.pi * min(frac, 1.0))))

    def done():
        return state["step"] >= max_steps if max_steps else state["elapsed"] >= budget

    def save_ck():
        torch.save(dict(model=sps.state_dict(), opt=opt.state_dict(), state=state), ck_path.with_suffix(".tmp"))
        ck_path.with_suffix(".tmp").replace(ck_path)

    bar = tqdm(total=max_steps or int(budget), desc="train sps", dynamic_ncols=True, mininterval=5)
    t_prev, last_ck, run = time.time(), time.time(), [0.0, 0, 0, 0]
    while not done():
        plan = batches(data, max_tokens, random.Random(seed * 1000 + state["epoch"]))
        while state["pos_in_epoch"] < len(plan) and not done():
            seqs = [data.seqs[i] for i in plan[state["pos_in_epoch"]]]
            ids, att, lab, p, valid = soft_labels_dense(seqs, device)
            sps.train()
            for g in opt.param_groups:
                g["lr"] = lr_at()
            hs = sps.model(input_ids=ids, attention_mask=att).last_hidden_state
            logits = sps.lm_head(hs[valid])
            logq = torch.log_softmax(logits.float(), -1)
            loss = -(p[valid] * logq.gather(-1, lab[valid])).sum(-1).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(sps.parameters(), 1.0)
            opt.step()
            state["step"] += 1
            state["pos_in_epoch"] += 1
            now = time.time()
            state["elapsed"] += now - t_prev
            t_prev = now
            run[0] += float(loss.detach())
            run[1] += 1
            run[2] += int((logits.argmax(-1) == lab[valid][:, 0]).sum())
            run[3] += int(valid.sum())
            bar.n = state["step"] if max_steps else min(int(state["elapsed"]), int(budget))
            if state["step"] % 10 == 0:
                e = dict(step=state["step"], min=round(state["elapsed"] / 60, 2), loss=round(run[0] / run[1], 4),
                         acc=[round(run[2] / max(run[3], 1), 3)], lr=opt.param_groups[0]["lr"])
                state["history"].append(e)
                log(json.dumps(e))
                bar.set_postfix(loss=e["loss"], acc=e["acc"][0])
                run = [0.0, 0, 0, 0]
            if time.time() - last_ck > 240:
                save_ck()
                last_ck = t_prev = time.time()
        if state["pos_in_epoch"] >= len(plan):
            state["epoch"] += 1
            state["pos_in_epoch"] = 0
    bar.close()
    save_ck()
    ev = evaluate_sps(sps, held, device=device)
    ev_all = evaluate_sps(sps, held, device=device, greedy_only=False)
    log("held-out (greedy rows): " + json.dumps(ev))
    log("held-out (all rows): " + json.dumps(ev_all))
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    sd = {k: v.detach().to(torch.float16).contiguous() for k, v in sps.state_dict().items() if k != "lm_head.weight"}
    save_file(sd, str(out / "model.safetensors"), metadata={"format": "pt"})
    d = dict(d, torch_dtype="float16")
    (out / "config.json").write_text(json.dumps(d, indent=2))
    if folder is not None:
        for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json"):
            if (Path(folder) / name).is_file():
                shutil.copy(Path(folder) / name, out / name)
    info = dict(method="sps", steps=state["step"], wall_minutes=round(state["elapsed"] / 60, 1),
                train_sequences=len(data), train_tokens=data.n_tokens(), train_response_positions=data.n_response(),
                heldout_greedy=ev, heldout_all=ev_all, hidden=hidden, layers=layers, lr=lr, max_tokens=max_tokens)
    (out / "train_info.json").write_text(json.dumps(dict(info, history=state["history"]), indent=1))
    return sps, ev
