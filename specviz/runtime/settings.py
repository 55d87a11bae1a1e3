"""Server configuration: which folders a model path typed in the app may point into.

A classroom server is reachable by every student's browser, so a path typed in the sidebar must
not open arbitrary files on the teacher's machine. Allowed are:

- SpecViz's own cache (`$SPECVIZ_CACHE` or the user cache dir) and the Hugging Face hub cache;
- folders named in `$SPECVIZ_ALLOWED_DIRS` (separated by the OS path separator, `:` on Linux);
- folders named in `specviz.toml` (in the working directory or next to app.py):

      [models]
      allowed_dirs = ["/srv/models", "~/checkpoints"]

Paths are compared after resolving `..` and symbolic links, so neither escapes the list.
SpecViz never executes code shipped with a checkpoint (`trust_remote_code` is never used) and
never downloads.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

from .. import SpecVizError
from .loading import cache_root

ROOT = Path(__file__).resolve().parents[2]
TOML_NAMES = ("specviz.toml",)


def _toml_dirs() -> list[Path]:
    out = []
    for base in dict.fromkeys((Path.cwd(), ROOT)):
        for name in TOML_NAMES:
            f = base / name
            if not f.is_file():
                continue
            try:
                data = tomllib.loads(f.read_text())
            except (OSError, ValueError) as e:
                raise SpecVizError(f"Cannot read {f}: {e}") from e
            dirs = (data.get("models") or {}).get("allowed_dirs") or []
            if not isinstance(dirs, list) or not all(isinstance(d, str) for d in dirs):
                raise SpecVizError(f"{f}: [models] allowed_dirs must be a list of folder names.")
            out += [Path(d).expanduser() for d in dirs]
    return out


def _hf_cache() -> Path | None:
    try:
        from huggingface_hub.constants import HF_HUB_CACHE  # optional: the hub library may be absent

        return Path(HF_HUB_CACHE)
    except Exception:  # noqa: BLE001 - the hub library is optional
        return None


def allowed_dirs() -> list[Path]:
    """The folders (resolved) a model path from the UI may lie in."""
    dirs = [cache_root(), _hf_cache()]
    env = os.environ.get("SPECVIZ_ALLOWED_DIRS", "")
    dirs += [Path(d).expanduser() for d in env.split(os.pathsep) if d.strip()]
    dirs += _toml_dirs()
    out = []
    for d in dirs:
        if d is None:
            continue
        r = d.resolve()
        if r not in out:
            out.append(r)
    return out


def is_allowed(path: str | os.PathLike) -> bool:
    p = Path(path).expanduser().resolve()
    return any(p == d or d in p.parents for d in allowed_dirs())


def check_ui_model_spec(spec: str | None) -> str | None:
    """Validate a model typed in the app: None/"default", a Hub repo id already in the local
    cache, or a folder inside an allowed directory. Returns the spec to load; raises
    SpecVizError with the reason otherwise."""
    if spec is None:
        return None
    text = str(spec).strip()
    if text.lower() in ("", "default", "smollm2", "smollm2-135m-instruct"):
        return None
    if len(text) > 1024 or any(ord(c) < 32 for c in text):
        raise SpecVizError("That model path is not valid: give a folder name or a cached Hub repo id.")
    looks_like_repo = text.count("/") == 1 and not text.startswith((".", "/", "~")) and not Path(text).exists()
    if looks_like_repo:
        return text  # resolved only from the local Hugging Face cache, never downloaded
    if not is_allowed(text):
        listed = ", ".join(str(d) for d in allowed_dirs())
        raise SpecVizError(
            f"{text!r} is outside the folders this server may load models from ({listed}). "
            "The person running the server can add a folder with $SPECVIZ_ALLOWED_DIRS or specviz.toml."
        )
    return text
