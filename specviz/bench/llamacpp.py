"""llama.cpp as an optional peer of the benchmark, through llama-cpp-python (`pip install llama-cpp-python`).

    llamacpp       llama.cpp's plain decoding (greedy at temperature 0)
    llamacpp-pld   llama.cpp with llama-cpp-python's prompt-lookup drafter (`LlamaPromptLookupDecoding`),
                   sized like our `pld`: n-grams of up to 3 tokens, 10 drafted tokens

Both read the very GGUF file our default model is converted from (`loading.default_gguf_path`) and get
the same chat-formatted token ids as our engine (never text, so both start from identical prompts), the
same thread count (llama.cpp's `n_threads` and `n_threads_batch`) and the same cap on new tokens; like our
engine they stop at an EOS token (kept in the output) or at the cap. Every run starts from an empty KV
cache: llama-cpp-python would otherwise reuse the cache of a previous prompt's shared prefix (the chat
template's system turn), which our engine never does. The time counted runs from the call to the last
token, prefill included, as for every method of the benchmark.

llama.cpp computes in its own way (the Q4_1 weights times activations it quantises to 8 bits, an f16 KV
cache), so its greedy output may leave ours after a near-tie; the benchmark reports how often it matches.
"""

from __future__ import annotations

import contextlib
import re
import time

from ..runtime.loading import DEFAULT_MODEL, default_gguf_path

METHODS = ("llamacpp", "llamacpp-pld")
INSTALL = "pip install llama-cpp-python"
PLD_NGRAM, PLD_TOKENS = 3, 10  # our pld's defaults (specviz.drafters.pld.PromptLookupDrafter)


def available() -> tuple[bool, str]:
    """(True, "") when llama-cpp-python imports; else (False, why, with the command that installs it)."""
    try:
        import llama_cpp  # noqa: F401  (optional: only these peers need it)
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding  # noqa: F401
    except Exception as e:  # ImportError, or its shared library failing to load (OSError, RuntimeError)
        detail = "" if isinstance(e, ModuleNotFoundError) else f" ({type(e).__name__}: {e})"
        return False, f"llama-cpp-python is not importable{detail}: install it with `{INSTALL}`"
    return True, ""


def unsupported(target) -> str:
    """Why the peers cannot run against this target ("" when they can)."""
    if target.model.name != DEFAULT_MODEL:
        return f"the llama.cpp peers run the default model's GGUF only, not {target.model.name}"
    if target.model.device.type != "cpu":
        import llama_cpp  # optional: only these peers need it

        if not llama_cpp.llama_supports_gpu_offload():
            return f"our runtime is on {target.model.device.type} but this llama-cpp-python build is CPU-only"
    return ""


class LlamaCppPeer:
    """One llama.cpp context on the default GGUF: `run(prompt_ids, max_new)` -> (new ids, seconds, first_token_s)."""

    def __init__(self, method: str, target, params, threads: int, n_ctx: int, seed: int = 0):
        from llama_cpp import Llama  # optional: only these peers need it
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding  # optional, as above

        assert method in METHODS, method
        self.method, self.params, self.seed = method, params, seed
        self.eos = set(target.eos_ids)
        self.gguf = default_gguf_path()
        draft = LlamaPromptLookupDecoding(max_ngram_size=PLD_NGRAM, num_pred_tokens=PLD_TOKENS) if method == "llamacpp-pld" else None
        with _no_extra_buffers() as extra_off:
            self.llm = Llama(
                model_path=str(self.gguf),
                n_ctx=n_ctx,
                n_batch=n_ctx,  # the prompt in one decode call, as our prefill is one pass
                n_threads=threads,
                n_threads_batch=threads,
                n_gpu_layers=0 if target.model.device.type == "cpu" else -1,
                seed=seed,
                draft_model=draft,
                verbose=False,
            )
        self.n_ctx = self.llm.n_ctx()
        import llama_cpp  # optional: only these peers need it

        self.describe = {
            "gguf": self.gguf.name,
            **build_info(llama_cpp),
            "n_threads": threads,
            "n_ctx": self.n_ctx,
            "gpu_layers": 0 if target.model.device.type == "cpu" else "all",
            "extra_buffers": not extra_off,  # llama.cpp's weight repacking (see _no_extra_buffers)
            **({"pld": {"max_ngram_size": PLD_NGRAM, "num_pred_tokens": PLD_TOKENS}} if draft else {}),
        }

    def sampling(self) -> dict:
        p = self.params
        if p.greedy:
            return dict(temp=0.0, top_k=1, top_p=1.0, min_p=0.0, typical_p=1.0, repeat_penalty=1.0)
        return dict(temp=p.temperature, top_k=p.top_k, top_p=p.top_p, min_p=0.0, typical_p=1.0, repeat_penalty=1.0)

    def run(self, prompt_ids: list[int], max_new: int):
        if len(prompt_ids) + max_new + 1 > self.n_ctx:
            raise ValueError(f"prompt of {len(prompt_ids)} tokens + {max_new} new exceeds llama.cpp's n_ctx {self.n_ctx}")
        llm, toks, first = self.llm, [], None
        kw = self.sampling()
        llm.set_seed(self.seed)
        t0 = time.perf_counter()
        llm.reset()  # an empty KV cache: no reuse of the previous prompt's prefix (see the module's docstring)
        gen = llm.generate(list(prompt_ids), reset=True, **kw)
        try:
            for t in gen:
                if first is None:
                    first = time.perf_counter() - t0
                toks.append(int(t))
                if t in self.eos or len(toks) >= max_new:
                    break
        finally:
            gen.close()
        secs = time.perf_counter() - t0
        return toks, secs, first or secs


def build_info(llama_cpp) -> dict:
    """llama-cpp-python's version and llama.cpp's own account of its build (`llama_print_system_info`:
    the instruction sets it was compiled for), recorded beside its timings. Why: the same CPU runs a
    native build and a generic one at very different speeds, so a number without its build misleads."""
    info = llama_cpp.llama_print_system_info()
    text = (info.decode(errors="replace") if isinstance(info, bytes) else str(info)).strip()
    out = {"llama_cpp_python": getattr(llama_cpp, "__version__", "?"), "system_info": text, "simd": simd_flags(text)}
    return dict(out, build=build_text(out))  # the README's table prints "build" as it is


def simd_flags(system_info: str) -> list[str]:
    """The features a system-info string reports as on: 'CPU : AVX = 1 | AVX2 = 1 | AVX512 = 0' ->
    ['AVX', 'AVX2']."""
    return [name for name, on in re.findall(r"([A-Za-z][A-Za-z0-9_]*) = (\d+)", system_info) if on != "0"]


def build_text(describe: dict | None) -> str:
    """'llama-cpp-python 0.3.36: AVX, AVX2, FMA' from a peer's recorded settings; 'build not recorded'
    for runs made before the build was kept."""
    d = describe or {}
    if not d.get("system_info"):
        return "build not recorded"
    return f"llama-cpp-python {d.get('llama_cpp_python', '?')}: {', '.join(simd_flags(d['system_info'])) or 'no SIMD'}"


@contextlib.contextmanager
def _no_extra_buffers():
    """Load with llama.cpp's "extra buffer types" (weight repacking) off; yields whether that took.

    On a Xeon with AMX, llama.cpp repacks this file's Q4_1 matrices for its AMX kernels, and the first
    decode then crashes (a segfault in ggml_backend_amx_mul_mat; llama-cpp-python 0.3.36 on a 2-core
    Xeon VM). Its other repackings (for AVX2 and Arm) take Q4_0, Q4_K, Q2_K and IQ4_NL, not Q4_1, so
    elsewhere this leaves the model's layers as they were. llama-cpp-python's `Llama` does not expose
    the setting (`llama_model_params.use_extra_bufts`), so the defaults it starts from are amended
    while it loads."""
    import llama_cpp.llama_cpp as low  # optional: only these peers need it

    base = low.llama_model_default_params
    known = any(name == "use_extra_bufts" for name, *_ in getattr(base(), "_fields_", ()))

    def amended():
        p = base()
        if known:
            p.use_extra_bufts = False
        return p

    low.llama_model_default_params = amended
    try:
        yield known
    finally:
        low.llama_model_default_params = base


def compare(ours: list[int], theirs: list[int], eos: set[int]) -> dict:
    """How a peer's greedy output relates to our vanilla's on one prompt: identical (up to and
    including EOS) and the number of leading tokens they share."""
    def cut(x):
        for j, t in enumerate(x):
            if t in eos:
                return x[: j + 1]
        return x

    a, b = cut(ours), cut(theirs)
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return {"identical_to_vanilla": a == b, "common_prefix": n}
