"""Transition shim: the app's Streamlit glue moved to `specviz.app` (one concern per module).
Pages import from there; this re-export keeps older imports working while they move."""

from .app.gate import _show_wait, heavy_work  # noqa: F401
from .app.measure import measure_forward  # noqa: F401
from .app.methods import EAGLE, METHODS, make_drafter, method_label, method_status, status_note, tree_settings_for  # noqa: F401
from .app.model import device_name, get_target, load_model_from_ui  # noqa: F401
from .app.prompts import (  # noqa: F401
    EXAMPLES, MAX_PROMPT_CHARS, check_prompt, clean_prompt, current_prompt, prompt_box, prompt_ids, set_prompt)
from .app.session import Session, config_key, run_generation, same_trace, start_session  # noqa: F401
from .app.sidebar import _PARSERS, current_method_ok, page_setup, parse_param, render_sidebar, round_param  # noqa: F401
from .app.state import DEFAULTS, lang, sampling_params, settings, tr  # noqa: F401


def step_session(sess):
    return sess.step()


def replay_round(sess, i):
    return sess.replay(i)
