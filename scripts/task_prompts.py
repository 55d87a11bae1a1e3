"""Task-style training prompts made from ShareGPT's own text, for `python -m specviz.train data --conversations`.

Spec-Bench asks for summaries, answers over passages and translations, where our chat-trained heads
guess worst. This builds such prompts without touching any benchmark: long prose answers of ShareGPT
to summarise, one to three of them as passages before the question that produced the first, and
German / Spanish / French sentences of ShareGPT to translate into English, beside plain first turns.
The first 200 conversations of the usual shuffled order (where the held-out split comes from) are
never used. Written as `sources.read_conversations` reads it: one [[prompt, None]] per item.

    PYTHONPATH=. .venv/bin/python scripts/task_prompts.py --n 1600 --out tasks.json.gz
    .venv/bin/python -m specviz.train data --conversations tasks.json.gz --n-train 1500 --n-heldout 64 \\
        --max-prompt-tokens 1024 --first-turn-chars 16:20000 --dtype fp32 --out <cache>/train/data-tasks

TRAINING.md ("task-style data for EAGLE-3") says what a head fine-tuned on them gained and lost.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from specviz.train.sources import iter_sharegpt, load_conversations  # noqa: E402

HELD_OUT_PREFIX = 200  # the held-out split is taken from the start of the shuffled conversations
STOPWORDS = {  # a language shows by its short words; four different ones make a text, two a sentence
    "German": ["der", "die", "und", "ist", "nicht", "ich", "das", "mit", "für", "ein", "eine", "sie", "wir", "auf"],
    "Spanish": ["el", "la", "de", "que", "y", "en", "los", "las", "por", "para", "una", "con"],
    "French": ["le", "la", "les", "des", "et", "est", "pour", "dans", "une", "que", "pas", "avec"],
}
# a template listed twice is drawn twice as often
SUMMARY = ["Summarize: {t}", "Summarize the following text:\n\n{t}", "{t}\n\nSummarize the text above in a few sentences.",
           "Write a short summary of this article:\n{t}", "Summarize: {t}"]
PASSAGES = ["{p}\n{q}", "{p}\n\nAnswer using the text above: {q}", "Context:\n{p}\n\nQuestion: {q}", "{p}\n{q}"]
TRANSLATE = ["Translate {lang} to English: {t}", "Translate {lang} to English: {t}", "Translate this into English: {t}"]


def language(text: str, needed: int = 4) -> str | None:
    padded = f" {text.lower()} "  # a word between spaces: "der," does not count
    for lang, stop in STOPWORDS.items():
        if sum(f" {w} " in padded for w in stop) >= needed:
            return lang
    return None


def is_prose(text: str) -> bool:
    """No code, tables or long lists: text a summary or a passage question makes sense of."""
    return "```" not in text and text.count("\n-") < 6 and text.count("|") < 4 and not re.search(r"[{};]\s*\n", text)


def sentences(text: str, lang: str):
    for s in re.split(r"(?<=[.!?])\s+|\n+", text):
        s = s.strip(" -*#0123456789.").strip()
        if 40 <= len(s) <= 400 and language(s, 2) == lang:
            yield s


def build(convs, n: int, rng: random.Random) -> list:
    answers, foreign, plain, seen = [], [], [], set()
    for conv in convs[HELD_OUT_PREFIX:]:
        for human, gpt in conv:
            for text in (human, gpt):
                lang = language(text) if text and "```" not in text else None
                for s in sentences(text, lang) if lang else ():
                    if s not in seen:
                        seen.add(s)
                        foreign.append((lang, s))
            if gpt and is_prose(gpt) and 900 <= len(gpt) <= 3500:
                answers.append((human, gpt))
        if 16 <= len(conv[0][0]) <= 1200:
            plain.append(conv[0][0])
    for pool in (answers, foreign, plain):
        rng.shuffle(pool)
    n_sum, n_rag = int(n * 0.3), int(n * 0.3)
    n_tr = min(int(n * 0.2), len(foreign))
    prompts, used = [], 0
    for _ in range(n_sum):
        prompts.append(rng.choice(SUMMARY).format(t=answers[used][1]))
        used += 1
    for _ in range(n_rag):
        k = rng.choice([1, 2, 3])
        group, used = answers[used : used + k], used + k
        question = group[0][0] if group[0][0] and len(group[0][0]) <= 400 else "What are the main points of the text?"
        texts = [gpt[: rng.randint(600, 1600)] for _, gpt in group]
        rng.shuffle(texts)
        prompts.append(rng.choice(PASSAGES).format(p="\n".join(texts), q=question))
    prompts += [rng.choice(TRANSLATE).format(lang=lang, t=s) for lang, s in foreign[:n_tr]]
    prompts += plain[: n - len(prompts)]
    rng.shuffle(prompts)
    return [[[p, None]] for p in prompts]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1600, help="prompts: 30%% summaries, 30%% passages, <= 20%% translations, the rest plain")
    ap.add_argument("--out", required=True, help="a .json.gz for `train data --conversations`")
    ap.add_argument("--seed", type=int, default=1205)
    args = ap.parse_args()
    convs = load_conversations(iter_sharegpt(), min_chars=1, max_chars=10**9, seed=0)
    items = build(convs, args.n, random.Random(args.seed))
    with gzip.open(args.out, "wt", encoding="utf-8") as f:
        json.dump(items, f, ensure_ascii=False)
    print(f"{len(items)} prompts from {len(convs)} conversations -> {args.out}")


if __name__ == "__main__":
    main()
