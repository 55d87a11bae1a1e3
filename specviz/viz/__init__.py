"""Pure figure builders for the app: traces and measured numbers in, Plotly figures out."""

from .figures import *  # noqa: F401,F403
from .figures import EXTRA_ID, SOURCE_COLORS, STATUS_COLORS  # noqa: F401
