"""SpecViz: a real speculative-decoding engine (EAGLE-1/2/3 and baselines) and a classroom app."""

__version__ = "0.1.0"


class SpecVizError(Exception):
    """An error a user can act on; the message says what went wrong and what to do."""
