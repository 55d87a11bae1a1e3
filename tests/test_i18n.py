"""The string tables: one mechanism, every key in both languages, each key in exactly one table."""

from collections import Counter

from specviz import i18n
from specviz.i18n import S, t


def test_each_key_lives_in_one_table():
    tables = (i18n.app, i18n.figures, i18n.pages, i18n.rule, i18n.lesson, i18n.batch, i18n.mistakes, i18n.inside)
    counts = Counter(k for tab in tables for k in tab.STRINGS)
    assert [k for k, n in counts.items() if n > 1] == []
    assert set(counts) == set(S)


def test_every_key_has_both_languages():
    assert [k for k, (en, zh) in S.items() if not en.strip() or not zh.strip()] == []


def test_lookup_falls_back_to_the_key_and_fills_placeholders():
    assert t("no.such.key", "zh") == "no.such.key"
    assert t("lesson.step_of", "en", i=2, n=10) == "Step 2 of 10"
    assert t("lesson.step_of", "zh", i=2, n=10) == "第 2 步，共 10 步"
