"""The shared model: loaded once per server process (st.cache_resource) and only read afterwards."""

from __future__ import annotations

import os
import platform

import streamlit as st
import torch

from .. import SpecVizError
from ..runtime.settings import check_ui_model_spec
from ..core.target import load_target
from .gate import heavy_work
from .state import DEFAULTS, tr


@st.cache_resource(show_spinner=False, max_entries=3)
def load_shared_target(dtype_name: str, spec: str | None):
    """One model per (precision, checkpoint) per process. `spec` has no default on purpose: the
    cache keys on the arguments as written, and (dtype,) vs (dtype, None) would load it twice."""
    return load_target(spec, dtype=torch.bfloat16 if dtype_name == "bf16" else torch.float32)


def get_target():
    """The shared target model, or None after showing an inline error."""
    try:
        with st.spinner(tr("c.loading_model")):
            return load_shared_target(st.session_state.get("dtype", DEFAULTS["dtype"]), st.session_state.get("model_spec"))
    except SpecVizError as e:
        st.error(tr("sb.model_error", err=e))
    except Exception as e:  # noqa: BLE001 - a broken install must not show a traceback
        st.error(tr("sb.model_error", err=f"{type(e).__name__}: {e}"))
    return None


def load_model_from_ui() -> None:
    """Sidebar callback: load the model typed in `w_model_path`. Only folders inside the cache
    or the configured directories (specviz.runtime.settings) are accepted; a damaged, tampered or
    unsupported checkpoint is refused with a message and the session keeps its previous model."""
    ss = st.session_state
    text = str(ss.get("w_model_path") or "")
    try:
        spec = check_ui_model_spec(text)
        with heavy_work():
            load_shared_target(ss.get("dtype", DEFAULTS["dtype"]), spec)
    except SpecVizError as e:
        ss["model_msg"] = ("error", tr("sb.model_error", err=e))
        return
    except Exception as e:  # noqa: BLE001 - never a traceback for a bad file
        ss["model_msg"] = ("error", tr("sb.model_error", err=f"{type(e).__name__}: {e}"))
        return
    if spec != ss.get("model_spec"):
        ss.pop("dec", None)  # a decoder belongs to the model it was started with
    ss["model_spec"] = spec
    ss["model_msg"] = ("success", tr("sb.loaded", spec=spec or "SmolLM2-135M-Instruct"))


def device_name() -> str:
    """What runs the model, in words: the GPU's name, or the CPU and its thread counts."""
    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPU threads, torch {torch.get_num_threads()} threads"


def device_label() -> str:
    """Short form for the sidebar: "cuda: <name>" or "cpu"."""
    return f"cuda: {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else tr("c.device_cpu", n=os.cpu_count())
