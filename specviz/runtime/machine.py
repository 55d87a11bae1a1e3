"""This machine and what one target pass costs on it: shared by the tree tuner, the benchmark and
the Why-it-is-free page (so all three measure the same way)."""

from __future__ import annotations

import functools
import hashlib
import platform
import re
import statistics
import time
from pathlib import Path

import torch

from . import qkernel



def cpuinfo_field(key: str, cpuinfo: str | None = None) -> str:
    """The first `key : value` of /proc/cpuinfo (or of the text given), '' where it says nothing (not Linux)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return ""
    for line in cpuinfo.splitlines():
        name, sep, value = line.partition(":")
        if sep and name.strip() == key:  # the whole name: "model" is not "model name"
            return value.strip()
    return ""


def machine() -> dict:
    return {
        "cpu": cpuinfo_field("model name") or platform.processor(),
        "cpu_id": cpu_id(),
        "threads": torch.get_num_threads(),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "numerics": numerics(),
    }


def cpu_id(cpuinfo: str | None = None) -> str:
    """'family 25 model 1 stepping 1' (x86 /proc/cpuinfo; '' elsewhere). Why: a VM often names its CPU
    only "AMD EPYC", and two EPYC generations rank the same peers differently (docs/runtime.md)."""
    parts = [(k, cpuinfo_field(k, cpuinfo)) for k in ("cpu family", "model", "stepping")]
    return " ".join(f"{k.split()[-1]} {v}" for k, v in parts if v)


def numerics() -> str:
    """What this machine's fp32 results depend on beyond the code: torch's vector kernels (its CPU
    capability: AVX512, AVX2, ...), the CPU's vendor (torch's dense matmuls run MKL, which picks its
    kernels by vendor: `mkl_blas_def_sgemm_kernel_0_zen` on an AMD EPYC; EAGLE-3 lessons recorded on
    an Intel Xeon with the same capability replayed there with q off by ~3e-7) and the block kernel's
    vector width. Two machines with the same string compute the same bits; others agree to ~1e-5."""
    cap = torch.backends.cpu.get_cpu_capability()
    lib = qkernel.loaded()
    width = getattr(lib, "blockmm_simd", None) if lib is not None else None
    vendor = cpu_vendor()
    return f"torch {cap}{f' ({vendor})' if vendor else ''}, block kernel {width() if width else 'none'}"


def cpu_has_bf16(cpuinfo: str | None = None) -> bool | None:
    """Whether the CPU computes bf16 natively (AVX-512 BF16 or AMX), None where /proc/cpuinfo does not
    say (not Linux). Why: without them torch emulates bf16, and a bf16-autocast training step runs
    many times slower than fp32 (docs/runtime.md, "Measured reasons behind code choices")."""
    flags = cpuinfo_field("flags", cpuinfo)
    if not flags:
        return None
    return bool({"avx512_bf16", "amx_bf16"} & set(flags.split()))


def cpu_vendor(cpuinfo: str | None = None) -> str:
    """'AMD', 'Intel', another vendor id, or '' where /proc/cpuinfo does not say (not Linux)."""
    vid = cpuinfo_field("vendor_id", cpuinfo)
    return {"AuthenticAMD": "AMD", "GenuineIntel": "Intel"}.get(vid, vid)


def device_key(model) -> str:
    """One file name per (device, thread count, precision and kernel, model): costs differ across all four."""
    m = machine()
    dev = m["cuda"] if model.device.type == "cuda" else f"{m['cpu']}-t{m['threads']}"
    dtype = str(model.dtype).replace("torch.", "")
    if getattr(model, "blocks", None) is not None:  # GGUF-block kernel: a different cost curve
        dtype += "-blocks"
    return re.sub(r"[^A-Za-z0-9._-]+", "_", f"{model.name}-{dtype}-{dev}")[:150]


@functools.lru_cache(maxsize=1)
def _kernel_digest() -> str:
    return hashlib.sha256((Path(__file__).with_name("kernels") / "blockmm.cpp").read_bytes()).hexdigest()[:12]


def runtime_id(model) -> str:
    """What decides a pass's cost besides the machine: torch, and for GGUF blocks the C++ kernel's
    source and the passes its fused layer serves (any tree, other passes up to a size). Cached costs
    carry it (tuning)."""
    rid = f"torch {torch.__version__}"
    if getattr(model, "blocks", None) is not None:
        rid += f", blockmm {_kernel_digest()}, fused: trees, <= {model.fused_max_tokens}"
    return rid


def sync(model):
    if model.device.type == "cuda":
        torch.cuda.synchronize(model.device)


@torch.no_grad()
def pass_times(model, sizes=(1, 4, 16, 64), context: int = 300, repeats: int = 5, batch: int = 1, blocks: bool = True,
               progress=None, head_rows: int | None = None) -> dict[int, list[float]]:
    """Seconds of each timed target pass over `batch` x n new tokens after `context` cached tokens.

    The sizes take turns (one warm-up round over all of them first, not returned; then `repeats`
    rounds, each starting one size further on), so a drift in the machine's speed hits every size
    alike: timed one size after another with 3 repeats, the same machine priced an extra token at
    0.2 ms one minute and 0.5 ms the next, and the tree tuner picked by that noise.
    `blocks=False`: dense weights; `progress(f)` gets the fraction done. `head_rows`: the LM head
    over at most that many rows, as the engine computes it for a draft tree (the root and the
    likely path), instead of over all n."""
    g = torch.Generator().manual_seed(0)
    lo, hi = min(100, model.cfg.vocab_size // 2), min(20000, model.cfg.vocab_size)  # ordinary ids of any vocabulary
    ctx = torch.randint(lo, hi, (batch, context), generator=g)
    cache = model.new_cache(context + max(sizes) + 1, batch=batch)
    model(ctx, cache)
    cache.commit()
    sizes = list(sizes)
    toks = {n: torch.randint(lo, hi, (batch, n), generator=g) for n in sizes}
    out, done, total = {n: [] for n in sizes}, 0, len(sizes) * (repeats + 1)
    for r in range(repeats + 1):
        k = r % len(sizes)
        for n in sizes[k:] + sizes[:k] if r else sizes:
            sync(model)
            t0 = time.perf_counter()
            if head_rows is None:
                model(toks[n], cache, blocks=blocks)
            else:
                hidden = model(toks[n], cache, blocks=blocks, head=False).hidden
                if hidden is not None:  # (a captured CUDA graph has computed its logits already)
                    model.logits(hidden[0, : min(n, head_rows)])
            sync(model)
            if r:
                out[n].append(time.perf_counter() - t0)
            cache.truncate(context)
            done += 1
            if progress:
                progress(done / total)
    return out


def forward_curve(model, sizes=(1, 4, 16, 64), context: int = 300, repeats: int = 5,
                  head_rows: int | None = None) -> dict[int, float]:
    """Median seconds of one target pass over n new tokens after `context` cached tokens
    (`head_rows`: see `pass_times`)."""
    return {n: statistics.median(ts) for n, ts in pass_times(model, sizes, context, repeats, head_rows=head_rows).items()}


def interpolate(curve: dict, n: float) -> float:
    """Piecewise-linear read of a measured {size: seconds} curve (keys ints or strings): the first
    value below its first size, the last slope carried on past its last size (a pass grows with its
    tokens), a one-point curve's value everywhere."""
    pts = sorted((int(k), float(v)) for k, v in curve.items())
    if not pts:
        raise ValueError("an empty curve has no value to read")
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    if n <= xs[0]:
        return ys[0]
    for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
        if n <= x1:
            return y0 + (y1 - y0) * (n - x0) / (x1 - x0)
    if len(xs) == 1:
        return ys[-1]
    return ys[-1] + (ys[-1] - ys[-2]) * (n - xs[-1]) / (xs[-1] - xs[-2])


def weight_floor(model, repeats: int = 5) -> float:
    """Seconds for the bare matrix products of one token (every weight read once, no attention),
    with the weights the runtime uses for a one-token pass (GGUF blocks or dense)."""
    x = torch.randn(1, model.cfg.hidden_size, dtype=model.dtype, device=model.device)
    times = []
    for _ in range(repeats + 1):
        sync(model)
        t0 = time.perf_counter()
        model.weight_pass(x)
        sync(model)
        times.append(time.perf_counter() - t0)
    return statistics.median(times[1:])
