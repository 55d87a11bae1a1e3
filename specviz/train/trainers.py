"""Trainers for the EAGLE-1, EAGLE-3 and Medusa heads on cached target states.

All three read the shards of `data.py` (features + top-k soft labels), so the target never runs
during training. Losses use a reduced vocabulary (the most frequent response tokens): the soft
labels are restricted to it and renormalised, which makes a 49k-vocabulary LM head affordable on
a CPU. The learning rate follows a cosine over the *time* budget (`--minutes`) or the step budget,
checkpoints are written every few minutes and a restarted run resumes from the last one.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm import tqdm

from .. import SpecVizError
from ..heads.eagle import Eagle1Head, Eagle3Head, head_config_from_target
from ..heads.io import save_head
from ..heads.medusa import MedusaHeads
from ..runtime.machine import cpu_has_bf16
from ..core.target import load_target
from .batches import Batch, batches, draft_vocab, index_map, make_batch, online_batch, soft_ce, token_frequencies
from .data import SeqData
from .head_init import init_head


# --------------------------------------------------------------------------- the loop
@dataclass
class TrainConfig:
    method: str
    data_dir: str
    out: str
    ckpt_dir: str
    minutes: float = 30.0
    max_steps: int = 0  # 0 = as many as the time allows
    lr: float = 1e-3
    warmup: int = 30
    max_tokens: int = 4096
    steps_ttt: int = 5  # EAGLE-3 unroll
    draft_vocab: int = 16384
    noise: float = 0.1  # EAGLE-1 input noise (uniform +-noise)
    medusa_heads: int = 4
    ckpt_every_s: float = 240.0
    seed: int = 0
    device: str = "cpu"
    autocast: bool = False
    max_shards: int = 0
    eval_every: int = 0
    log_every: int = 10
    init: str = ""  # a head folder to fine-tune from (its weights and draft vocabulary), instead of a fresh head
    follow: bool = False  # read shards a data run wrote since, at each epoch start (train while the data grows)
    model: str = ""  # the target checkpoint (default: SmolLM2)
    grow_vocab: bool = False  # with init: grow an EAGLE-3 head's draft vocabulary to draft_vocab tokens
    feature_dtype: str = "bf16"  # token-only data: precision of the target pass that recomputes taps and labels on a GPU
    token_input: bool = True  # EAGLE-1/2: read the shifted token beside the feature (False: the ablation without it)
    taps: str = "three"  # EAGLE-3: "three" fuses the low, middle and high taps; "top" feeds the final state to all three slots
    extra: dict = field(default_factory=dict)


def _tap_keys(method, tcfg, taps: str = "three"):
    """The cached states an EAGLE-3 head fuses (low, middle, high), or EAGLE-1's one final state.
    `taps="top"`: the final state in all three slots of the same fc, the ablation of fusion (the head
    keeps its shape and init; only what it reads changes)."""
    if taps not in ("three", "top"):
        raise SpecVizError(f"taps={taps!r}: choose 'three' (low, middle and high layers fused) or 'top'.")
    if method == "eagle3" and taps == "three":
        return [str(t) for t in tcfg.eagle3_layers()]
    if method == "eagle3":
        return ["final"] * 3
    return ["final"]


def build_head(method, tcfg, cfg: TrainConfig, data: SeqData, target_model):
    if method == "eagle3":
        ids = draft_vocab(data, tcfg.vocab_size, cfg.draft_vocab)
        head = Eagle3Head(head_config_from_target(tcfg, draft_vocab_size=len(ids)))
        head.set_vocab(ids)
        with torch.no_grad():
            head.lm_head.weight.copy_(target_model.lm_head[ids].float())
            head.norm.weight.copy_(target_model.norm.float())
    elif method == "eagle1":
        head = Eagle1Head(head_config_from_target(tcfg, bias=True))
        if not cfg.token_input:
            head.config.setdefault("specviz", {})["token_input"] = False
    elif method == "medusa":
        head = MedusaHeads(dict(hidden_size=tcfg.hidden_size, vocab_size=tcfg.vocab_size,
                                medusa_num_heads=cfg.medusa_heads, medusa_num_layers=1, shared_lm_head=True))
    else:
        raise SpecVizError(f"Unknown head {method!r}: choose eagle1, eagle3 or medusa.")
    return head


def loss_vocab(method, head, data, tcfg, cfg):
    if method == "eagle3":
        return head.target_ids().cpu()
    return draft_vocab(data, tcfg.vocab_size, cfg.draft_vocab)


def compute_loss(method, head, batch: Batch, taps, cfg: TrainConfig, vocab_ids, train=True):
    """Loss plus per-step (top-1 correct, count) statistics."""
    B, Tf = batch.tokens.shape[0], batch.Tf
    dev = batch.tokens.device
    pos0 = torch.arange(Tf, device=dev)[None].expand(B, Tf)
    stats = []
    if method == "eagle3":
        low, mid, high = (batch.feats[t] for t in taps)
        g = head.fuse(low, mid, high)
        S = cfg.steps_ttt
        toks = [batch.step(j)[0] for j in range(S)]
        outs, widx = head.unroll(toks, g, pos0, S, start=batch.start)
        loss = 0.0
        for j, out in enumerate(outs):
            _, idx, p, top1, valid = batch.step_at(j, widx if j else None)
            if not valid.any():
                stats.append((0, 0, 0))
                continue
            logits = head.logits(out[valid])
            ce = soft_ce(logits, idx[valid], p[valid]).mean()
            loss = loss + (0.8**j) * ce
            pred = head.draft_to_target(logits.argmax(-1))
            stats.append((int((pred == top1[valid]).sum()), int(valid.sum()), float(ce.detach())))
        return loss, stats
    if method == "eagle1":
        f = batch.feats["final"]
        x = f + (torch.rand_like(f) * 2 - 1) * cfg.noise if train else f
        toks, idx, p, top1, valid = batch.step(0)
        out = head.forward_seq(toks, x, pos0)
        # target feature of index t is the state after token t+1
        tgt = torch.cat([f[:, 1:], torch.zeros_like(f[:, :1])], 1)
        vf = valid.clone()
        vf[:, Tf - 1 :] = False
        if not vf.any():
            return torch.zeros((), requires_grad=True), [(0, 0, 0)]
        reg = F.smooth_l1_loss(out[vf].float(), tgt[vf].float())
        logits = head.logits(out[vf], vocab_ids)
        ce = soft_ce(logits, idx[vf], p[vf]).mean()
        pred = vocab_ids[logits.argmax(-1)]
        stats.append((int((pred == top1[vf]).sum()), int(vf.sum()), float(ce.detach())))
        return reg + 0.1 * ce, stats
    if method == "medusa":
        f = batch.feats["final"]
        feats = head(f)  # [K, B, Tf, H]
        loss = 0.0
        for i in range(head.n_heads):
            _, idx, p, top1, valid = batch.step(i)  # head i predicts token t+2+i
            if not valid.any():
                stats.append((0, 0, 0))
                continue
            logits = head.logits(feats[i][valid], vocab_ids)
            ce = soft_ce(logits, idx[valid], p[valid]).mean()
            loss = loss + (0.8**i) * ce
            pred = vocab_ids[logits.argmax(-1)]
            stats.append((int((pred == top1[valid]).sum()), int(valid.sum()), float(ce.detach())))
        return loss, stats
    raise SpecVizError(method)


@torch.no_grad()
def evaluate(method, head, data: SeqData, taps, cfg: TrainConfig, vocab_ids, steps: int = 6, greedy_only=True,
             device="cpu", max_tokens=4096, featurizer=None):
    """Held-out per-step top-1 agreement with the target, unrolling the head on its own outputs.

    step j at anchor t: the head has seen the true tokens up to t+1+j and its *own* states for
    steps < j (exactly what drafting a chain does); `acc[j]` = P(top-1 == target argmax), and
    `chain[j]` = P(steps 0..j all right) -> expected accepted length of a greedy chain of depth
    `steps`: tau_chain = 1 + sum_j chain[j]. `featurizer`: the target that computes the states of
    token-only data (`online_batch`).
    """
    head.eval()
    seqs = [s for s in data.seqs if (s.get("temp", 0.0) == 0.0 or not greedy_only)]
    if not seqs:
        return {}
    V = head.m.vocab_size if hasattr(head, "m") else head.config["vocab_size"]
    imap = index_map(vocab_ids, V)
    right = torch.zeros(steps)
    chain = torch.zeros(steps)
    count = torch.zeros(steps)
    n_anchor = 0
    for bi in batches(data_subset(seqs), max_tokens, random.Random(0)):
        batch = _make([seqs[i] for i in bi], taps, imap, steps + 1, device, featurizer)
        B, Tf = batch.tokens.shape[0], batch.Tf
        pos0 = torch.arange(Tf, device=device)[None].expand(B, Tf)
        ok_all = None
        for j in range(steps):
            if method == "medusa":
                _, idx, p, top1, valid = batch.step(j)
                if j == 0:
                    hs = head(batch.feats["final"])
                if j >= head.n_heads:
                    break
                pred = head.logits(hs[j]).argmax(-1)
                anchor_valid = batch.step(0)[4]
            else:
                if j == 0:
                    toks = [batch.step(k)[0] for k in range(steps)]
                    h0 = head.fuse(*(batch.feats[t] for t in taps)) if method == "eagle3" else batch.feats["final"]
                    outs, widx = head.unroll(toks, h0, pos0, steps, start=batch.start)
                    if widx is not None:
                        outs[0] = outs[0].gather(1, widx[..., None].expand(-1, -1, outs[0].shape[-1]))
                _, idx, p, top1, valid = batch.step_at(j, widx)
                out = outs[j]
                if method == "eagle3":
                    pred = head.draft_to_target(head.logits(out).argmax(-1))
                else:
                    pred = head.logits(out).argmax(-1)
                anchor_valid = batch.step_at(0, widx)[4]
            ok = (pred == top1) & valid
            # anchors: indices whose first drafted position has a label
            ok_all = ok if ok_all is None else ok_all & ok
            a = anchor_valid
            right[j] += float((ok & a).sum())
            chain[j] += float((ok_all & a).sum())
            count[j] += float((valid & a).sum())
        n_anchor += int(batch.step(0)[4].sum())  # every valid step-0 label is one anchor
    acc = (right / count.clamp(min=1)).tolist()
    ch = (chain / max(n_anchor, 1)).tolist()
    return {"acc": [round(x, 4) for x in acc], "chain": [round(x, 4) for x in ch],
            "tau_chain": round(1 + sum(ch), 3), "anchors": n_anchor, "sequences": len(seqs)}


def _make(seqs, taps, imap, steps, device, featurizer) -> Batch:
    """A batch from cached states, or from the target's pass when the data is token ids only."""
    if featurizer is not None:
        return online_batch(seqs, featurizer, taps, imap, steps)
    return make_batch(seqs, taps, imap, steps, device=device)


def _featurizer(cfg: TrainConfig, data: SeqData, held: SeqData, model, dev, log):
    """The target that recomputes taps and labels of token-only data (None for cached states):
    on a GPU a copy there in `feature_dtype`, on a CPU the fp32 model itself."""
    if not (data.tokens_only or held.tokens_only):
        return None
    if data.tokens_only != held.tokens_only:
        raise SpecVizError(f"{cfg.data_dir} mixes token-only shards with cached states: build one kind per folder.")
    if dev.type == "cpu":
        return model
    dtypes = {"bf16": torch.bfloat16, "fp32": torch.float32}
    log(f"token-only data: the target recomputes taps and labels on {dev} in {cfg.feature_dtype}")
    return load_target(cfg.model or None, dtype=dtypes[cfg.feature_dtype], device=dev, block_weights=False).model


class _Subset:
    def __init__(self, seqs):
        self.seqs = seqs

    def __len__(self):
        return len(self.seqs)


def data_subset(seqs):
    return _Subset(seqs)


def train(cfg: TrainConfig, log=print, model=None):
    """Train (or resume) one head; `model` = a TargetModel (default: load the default target)."""
    torch.manual_seed(cfg.seed)
    dev = torch.device(cfg.device)
    if cfg.autocast and dev.type == "cpu" and cpu_has_bf16() is False:
        log("--autocast ignored: this CPU has no native bf16 (AVX-512 BF16 or AMX), where torch's emulated bf16 "
            "made a training step >20x slower than fp32 on a Zen 3; training in fp32")
        cfg.autocast = False
    if model is None:
        model = load_target(cfg.model or None, dtype=torch.float32, device="cpu").model
    tcfg = model.cfg
    taps = _tap_keys(cfg.method, tcfg, cfg.taps)
    t_load = time.time()
    data = SeqData(cfg.data_dir, "train", taps=taps, max_shards=cfg.max_shards or None)
    held = SeqData(cfg.data_dir, "heldout", taps=taps, max_shards=cfg.max_shards or None)
    log(f"data: {len(data)} train sequences ({data.n_tokens()} tokens, {data.n_response()} response positions), "
        f"{len(held)} held-out; loaded in {time.time() - t_load:.0f} s")
    feat = _featurizer(cfg, data, held, model, dev, log)
    head = (init_head(cfg.init, tcfg, cfg.method, cfg.draft_vocab if cfg.grow_vocab else 0, data, model) if cfg.init
            else build_head(cfg.method, tcfg, cfg, data, model))
    head = head.to(dev)
    init_sha = state_digest(head)  # before any resume: the weights this run started from
    embed = model.embed.to(dev)
    head.bind(embed, embed if tcfg.tie_embeddings else model.lm_head.to(dev))
    opt = torch.optim.AdamW([p for p in head.parameters() if p.requires_grad], lr=cfg.lr, betas=(0.9, 0.95),
                            weight_decay=0.0)
    ckdir = Path(cfg.ckpt_dir)
    ckdir.mkdir(parents=True, exist_ok=True)
    ck_path = ckdir / "last.pt"
    state = resume(ck_path, head, opt, "head", dev, log)
    state.setdefault("init_sha256", init_sha)
    # after resume: a resumed EAGLE-3 head keeps the draft vocabulary (d2t) it was trained with,
    # even when the data has grown since and would pick a slightly different one
    vocab_ids = loss_vocab(cfg.method, head, data, tcfg, cfg).to(dev)
    imap = index_map(vocab_ids.cpu(), tcfg.vocab_size)
    cov = token_frequencies(data, tcfg.vocab_size)
    log(f"loss vocabulary: {len(vocab_ids)} tokens covering {float(cov[vocab_ids.cpu()].sum()) / float(cov.sum()):.4f} "
        "of response tokens")
    budget = cfg.minutes * 60
    steps_ttt = cfg.steps_ttt if cfg.method == "eagle3" else (cfg.medusa_heads if cfg.method == "medusa" else 1)

    def lr_at(step, elapsed):
        frac = elapsed / budget if not cfg.max_steps else step / cfg.max_steps
        warm = min(1.0, (step + 1) / cfg.warmup)
        return cfg.lr * warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(frac, 1.0))))

    def save_ck():
        tmp = ck_path.with_suffix(".tmp")
        torch.save(dict(head=head.state_dict(), opt=opt.state_dict(), state=state, cfg={k: str(v) if isinstance(v, Path) else v for k, v in cfg.__dict__.items()}), tmp)
        tmp.replace(ck_path)

    def done():
        if cfg.max_steps:
            return state["step"] >= cfg.max_steps
        return state["elapsed"] >= budget

    bar = tqdm(total=cfg.max_steps or int(budget), initial=state["step"] if cfg.max_steps else int(state["elapsed"]),
               desc=f"train {cfg.method}", unit="step" if cfg.max_steps else "s", dynamic_ncols=True, mininterval=5)
    last_ck = time.time()
    run = {"loss": 0.0, "n": 0, "right": None, "count": None, "pos": 0}
    t_prev = time.time()
    while not done():
        if cfg.follow and state["pos_in_epoch"] == 0 and (n_new := data.refresh()):
            log(f"epoch {state['epoch']}: {n_new} new shards -> {len(data)} train sequences ({data.n_tokens()} tokens)")
        ep_rng = random.Random(cfg.seed * 1000 + state["epoch"])
        plan = batches(data, cfg.max_tokens, ep_rng)
        while state["pos_in_epoch"] < len(plan) and not done():
            bi = plan[state["pos_in_epoch"]]
            batch = _make([data.seqs[i] for i in bi], taps, imap, steps_ttt, dev, feat)
            head.train()
            for g in opt.param_groups:
                g["lr"] = lr_at(state["step"], state["elapsed"])
            with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cfg.autocast):
                loss, stats = compute_loss(cfg.method, head, batch, taps, cfg, vocab_ids)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
            opt.step()
            state["step"] += 1
            state["pos_in_epoch"] += 1
            now = time.time()
            state["elapsed"] += now - t_prev
            t_prev = now
            run["loss"] += float(loss.detach())
            run["n"] += 1
            run["pos"] += int(batch.valid.sum())
            r = torch.tensor([s[0] for s in stats], dtype=torch.float)
            c = torch.tensor([s[1] for s in stats], dtype=torch.float)
            run["right"] = r if run["right"] is None else run["right"] + r
            run["count"] = c if run["count"] is None else run["count"] + c
            bar.n = state["step"] if cfg.max_steps else min(int(state["elapsed"]), int(budget))
            if state["step"] % cfg.log_every == 0:
                acc = (run["right"] / run["count"].clamp(min=1)).tolist()
                entry = dict(step=state["step"], min=round(state["elapsed"] / 60, 2), loss=round(run["loss"] / run["n"], 4),
                             acc=[round(a, 3) for a in acc], lr=opt.param_groups[0]["lr"],
                             positions=run["pos"])
                state["history"].append(entry)
                bar.set_postfix(loss=entry["loss"], acc0=entry["acc"][0])
                log(json.dumps(entry))
                run = {"loss": 0.0, "n": 0, "right": None, "count": None, "pos": 0}
            if cfg.eval_every and state["step"] % cfg.eval_every == 0:
                ev = evaluate(cfg.method, head, held, taps, cfg, vocab_ids, device=dev, featurizer=feat)
                state["history"].append(dict(step=state["step"], eval=ev))
                log(json.dumps(dict(step=state["step"], eval=ev)))
            if time.time() - last_ck > cfg.ckpt_every_s:
                save_ck()
                last_ck = time.time()
                t_prev = time.time()
        if state["pos_in_epoch"] >= len(plan):
            state["epoch"] += 1
            state["pos_in_epoch"] = 0
    bar.close()
    save_ck()
    ev = evaluate(cfg.method, head, held, taps, cfg, vocab_ids, device=dev, featurizer=feat)
    ev_all = evaluate(cfg.method, head, held, taps, cfg, vocab_ids, device=dev, greedy_only=False, featurizer=feat)
    log("held-out (greedy rows): " + json.dumps(ev))
    log("held-out (all rows): " + json.dumps(ev_all))
    export(cfg, head, state, ev, ev_all, len(data), data.n_tokens(), data.n_response())
    return head, ev


def export(cfg, head, state, ev, ev_all, n_seq, n_tok, n_resp):
    info = dict(method=cfg.method, steps=state["step"], init_sha256=state.get("init_sha256"), epochs=state["epoch"] + state["pos_in_epoch"] / 1e9,
                wall_minutes=round(state["elapsed"] / 60, 1), train_sequences=n_seq, train_tokens=n_tok,
                train_response_positions=n_resp, heldout_greedy=ev, heldout_all=ev_all,
                config={k: v for k, v in cfg.__dict__.items() if k not in ("extra",)})
    out = Path(cfg.out)
    save_head(head, out, dtype=torch.float16, extra=dict(trained_by="specviz.train", **{k: info[k] for k in ("method", "steps", "wall_minutes")}))
    (out / "train_info.json").write_text(json.dumps(dict(info, history=state["history"]), indent=1))
    return out


def state_digest(module) -> str:
    """A short digest of a module's weights and buffers: two runs that start from the same head say so."""
    h = hashlib.sha256()
    for name, t in sorted(module.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().float().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def resume(ck_path: Path, module, opt, key: str, device, log) -> dict:
    """Restore model and optimiser from our own resume file, if any; return the loop state."""
    if not ck_path.exists():
        return dict(step=0, elapsed=0.0, epoch=0, pos_in_epoch=0, history=[])
    ck = torch.load(ck_path, map_location=device, weights_only=True)  # tensors and plain values only
    module.load_state_dict(ck[key])
    opt.load_state_dict(ck["opt"])
    state = ck["state"]
    log(f"resumed from {ck_path} at step {state['step']} ({state['elapsed'] / 60:.1f} min done)")
    return state
