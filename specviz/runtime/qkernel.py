"""Build and load the block-weight matmul kernel (specviz/runtime/kernels/blockmm.cpp) with the system C++ compiler.

Why a compiled kernel: fp32 decoding of the default model streams 540 MB of dequantised weights per
target pass; the GGUF's own blocks are 85 MB. The library is compiled once per CPU and source version
into the user cache (about 3 s with g++) and loaded with ctypes, so no Python headers, torch headers or
ninja are needed. Without a compiler, `library()` returns None and the target keeps its dense weights.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

from .loading import cache_root

SOURCE = Path(__file__).parent / "kernels" / "blockmm.cpp"
FLAGS = ["-O3", "-ffp-contract=off", "-fopenmp", "-shared", "-fPIC", "-std=c++17"]

_lock = threading.Lock()
_loaded: dict[tuple, object] = {}  # (native, isa) -> library or None
_errors: dict[tuple, str] = {}


def _cpu_name() -> str:
    """CPU model and feature flags: -march=native code is only valid where both match."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        wanted = [next((ln for ln in lines if ln.startswith(k)), "") for k in ("model name", "flags")]
        if any(wanted):
            return "\n".join(wanted)
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _compiler() -> str | None:
    return os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")


# `$SPECVIZ_KERNEL_ISA=avx2` builds the AVX2 + FMA path on a CPU that also has AVX-512, so that path
# (what a Zen 3 or most laptops run) can be tested and timed anywhere; it gives the same bits.
ISA_FLAGS = {"native": [], "avx2": ["-mno-avx512f"]}


def isa() -> str:
    """The instruction set the native build targets: 'native' (the widest the CPU has) or 'avx2'
    (`build` refuses any other value, and `error()` says so)."""
    return os.environ.get("SPECVIZ_KERNEL_ISA", "native").strip().lower() or "native"


def _key(native: bool, isa_name: str | None) -> tuple:
    return (True, isa_name or isa()) if native else (False, "portable")


def build(native: bool = True, folder: Path | None = None, isa_name: str | None = None) -> Path:
    """Compile the kernel (cached by source, flags and CPU); `native=False` builds the portable C++ path,
    `isa_name` ('native', 'avx2'; default `$SPECVIZ_KERNEL_ISA`) the instruction set of a native build."""
    cxx = _compiler()
    if cxx is None:
        raise RuntimeError("no C++ compiler found (install g++ or set $CXX)")
    name = _key(True, isa_name)[1]
    if native and name not in ISA_FLAGS:
        raise RuntimeError(f"SPECVIZ_KERNEL_ISA must be one of {', '.join(ISA_FLAGS)}, got {name!r}")
    flags = FLAGS + (["-march=native", *ISA_FLAGS[name]] if native else [])
    source = SOURCE.read_bytes()
    key = hashlib.sha256(source + " ".join([cxx, *flags, _cpu_name()]).encode()).hexdigest()[:16]
    folder = Path(folder or cache_root() / "kernels")
    target = folder / f"blockmm-{key}.so"
    if target.is_file():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=folder)
    os.close(fd)
    try:
        run = subprocess.run([cxx, *flags, str(SOURCE), "-o", tmp], capture_output=True, text=True, timeout=300)
        if run.returncode != 0:
            raise RuntimeError(f"{cxx} failed: {run.stderr.strip()[-800:]}")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def library(native: bool = True, isa_name: str | None = None):
    """The loaded kernel library, or None (reason in `error()`) when it cannot be built or is disabled.
    `isa_name`: see `build` (a test loads the AVX2 build beside the native one)."""
    if os.environ.get("SPECVIZ_KERNEL", "1") == "0":
        return None
    with _lock:
        key = _key(native, isa_name)
        if key in _loaded:
            return _loaded[key]
        lib = None
        try:
            import torch  # noqa: F401  -- load torch's libgomp first so the kernel shares its OpenMP runtime

            lib = ctypes.CDLL(str(build(native, isa_name=key[1] if native else None)))
            i64, ptr = ctypes.c_int64, ctypes.c_void_p
            for name in ("q4_1_mm", "q8_0_mm"):
                fn = getattr(lib, name)
                fn.argtypes = [ptr, i64, i64, ptr, ptr, i64, ptr, ctypes.c_int]
                fn.restype = None
            lib.blockmm_has_avx512.restype = ctypes.c_int
            lib.blockmm_simd.restype = ctypes.c_int
            lib.layer_forward.argtypes = [ptr, ptr, i64, i64, ptr, ptr, ptr, ptr, ptr, i64, ptr, ctypes.c_int]
            lib.layer_forward.restype = None
            lib.layers_forward_batch.argtypes = [ptr, i64, ptr, i64, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr,
                                                 ctypes.c_int, ptr]
            lib.layers_forward_batch.restype = None
            lib.head_layer_forward.argtypes = [ptr, ptr, ptr, i64, i64, i64, ptr, ptr, ptr, ptr, ptr, i64, ptr, ctypes.c_int]
            lib.head_layer_forward.restype = None
            lib.draft_level.argtypes = [ptr, ptr, ptr, ptr, i64, i64, i64, ptr, ptr, ctypes.c_char_p, ptr, ptr, i64,
                                        ptr, i64, ctypes.c_float, ptr, i64, ptr, ptr, ptr, ctypes.c_int]
            lib.draft_level.restype = None
            lib.draft_tree.argtypes = [ptr, ptr, ptr, ptr, i64, i64, i64, i64, ptr, ptr, ptr, ptr, i64, ctypes.c_float,
                                       i64, i64, i64, ctypes.c_double, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, i64,
                                       ctypes.c_int]
            lib.draft_tree.restype = i64
            lib.softmax_top_rows.argtypes = [ptr, i64, i64, ctypes.c_float, i64, ptr, ptr, ptr, ctypes.c_int]
            lib.softmax_top_rows.restype = None
            lib.sort_rows_f32.argtypes = [ptr, ptr, i64, i64, ctypes.c_int]
            lib.sort_rows_f32.restype = None
            lib.argmax_rows.argtypes = [ptr, i64, i64, ptr]
            lib.argmax_rows.restype = None
        except Exception as e:  # no compiler, read-only cache, a bad ISA name...: fall back to dense weights
            _errors[key] = str(e)
            lib = None
        _loaded[key] = lib
        return lib


class Mat(ctypes.Structure):
    """Mirror of `struct Mat` in blockmm.cpp: one block-weight matrix."""

    _fields_ = [("kind", ctypes.c_int64), ("qs", ctypes.c_void_p), ("scales", ctypes.c_void_p),
                ("n", ctypes.c_int64), ("k", ctypes.c_int64)]


class LayerArgs(ctypes.Structure):
    """Mirror of `struct LayerArgs` in blockmm.cpp: one decoder layer's weights and shape."""

    _fields_ = [("wqkv", Mat), ("wo", Mat), ("w13", Mat), ("w2", Mat),
                ("attn_norm", ctypes.c_void_p), ("mlp_norm", ctypes.c_void_p), ("eps", ctypes.c_double),
                ("n_heads", ctypes.c_int64), ("n_kv", ctypes.c_int64), ("head_dim", ctypes.c_int64),
                ("inter", ctypes.c_int64)]


class DraftArgs(ctypes.Structure):
    """Mirror of `struct DraftArgs` in blockmm.cpp: a draft head and the target weights it borrows."""

    _fields_ = [("layer", LayerArgs), ("embed", ctypes.c_void_p), ("eagle3", ctypes.c_int64), ("fc", Mat),
                ("fc_bias", ctypes.c_void_p), ("input_norm", ctypes.c_void_p), ("hidden_norm", ctypes.c_void_p),
                ("final_norm", ctypes.c_void_p), ("lm", Mat), ("lm_ids", ctypes.c_void_p)]


def loaded():
    """The native library if something in this process has loaded it already, else None: helpers
    that merely go faster with it (a sort) never start a compile of their own."""
    return _loaded.get(_key(True, None))


def error(native: bool = True) -> str | None:
    return _errors.get(_key(native, None))
