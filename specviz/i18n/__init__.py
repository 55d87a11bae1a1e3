"""English and Simplified Chinese strings for the app and its figures: one mechanism, tables by area.

`t(key, lang, **fmt)` looks a string up (falling back to English, then to the key itself) and
fills `{placeholders}`. Every key must exist in both languages (tests check it).
"""

from __future__ import annotations

LANGS = {"en": "English", "zh": "简体中文"}

from . import app, batch, figures, inside, lesson, mistakes, pages, rule

# key -> (English, Chinese); each area keeps its own table, a key lives in exactly one (tests check)
S: dict[str, tuple[str, str]] = {}
for _table in (app, figures, pages, rule, lesson, batch, mistakes, inside):
    S.update(_table.STRINGS)


def t(key: str, lang: str = "en", **fmt) -> str:
    pair = S.get(key)
    if pair is None:
        text = key
    else:
        text = pair[1] if lang == "zh" else pair[0]
        if not text:
            text = pair[0]
    if fmt:
        try:
            return text.format(**fmt)
        except (KeyError, IndexError, ValueError):
            return text
    return text
