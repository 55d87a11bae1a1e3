"""Spot the mistake: errors made outside the acceptance rule, run on the engine and sorted by what they do.

:mod:`.catalog` lists them with their class (breaks / slower / misreports), :mod:`.variants` holds each
one as a single change from the correct engine, :mod:`.run` runs one beside the correct engine and
collects the evidence (token identity, the exact one-round check, tau, work and speed, the printed
figure). The page is views/mistakes.py; the texts are specviz.i18n.mistakes.
"""

from .catalog import BY_NAME, CLASSES, MISTAKES, Mistake, get
from .run import CaseResult, Printed, Run, run_case, shown_class

__all__ = ["BY_NAME", "CLASSES", "MISTAKES", "CaseResult", "Mistake", "Printed", "Run", "get", "run_case", "shown_class"]
