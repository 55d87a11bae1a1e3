"""Device-tuned draft trees: the tree size that maximises expected tokens per second *here*.

Two measurements, kept apart because they change for different reasons:

* the head's **acceptance profile** (greedy, device independent, shipped beside the head as
  `tree_profile.json`): for every tree size N and depth d, the mean accepted length tau(N, d)
  that tree would have had. One calibration run answers every size. An EAGLE-2 tree of N nodes
  and depth d is the best N-1 of the same scored candidates, and a greedy walk accepts exactly
  the longest prefix of the target's own continuation that lies in the tree. Static trees
  (EAGLE-1, Medusa) rank their nodes by how often each was on the target's path, so a smaller
  static tree keeps the nodes that earn the most.
* the device's **costs** (measured once, cached per device, precision and model in the user
  cache): the target's forward time for n tree tokens after a few hundred cached ones, the
  drafter's time per round at each size, and the engine's fixed cost per round.

The choice maximises tau(N, d) / (overhead + draft(N, d) + forward(N)).
"""

from __future__ import annotations

import datetime as dt
import json
import platform
import re
import statistics
import time
from pathlib import Path

import torch

from . import SpecVizError

GRID = (1, 2, 3, 4, 5, 6, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 64)
MAX_DEPTH = 8  # deepest dynamic tree profiled
PROFILE_FILE = "tree_profile.json"


# ----------------------------------------------------------------------------- machine
def machine() -> dict:
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "threads": torch.get_num_threads(),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "torch": torch.__version__,
        "python": platform.python_version(),
    }


def device_key(model) -> str:
    """One file name per (device, thread count, precision and kernel, model): costs differ across all four."""
    m = machine()
    dev = m["cuda"] if model.device.type == "cuda" else f"{m['cpu']}-t{m['threads']}"
    dtype = str(model.dtype).replace("torch.", "")
    if getattr(model, "blocks", None) is not None:  # GGUF-block kernel: a different cost curve
        dtype += "-blocks"
    return re.sub(r"[^A-Za-z0-9._-]+", "_", f"{model.name}-{dtype}-{dev}")[:150]


def _sync(model):
    if model.device.type == "cuda":
        torch.cuda.synchronize(model.device)


# ----------------------------------------------------------------------------- target costs
@torch.no_grad()
def forward_curve(model, sizes=(1, 4, 16, 64), context: int = 300, repeats: int = 5) -> dict[int, float]:
    """Median seconds of one target pass over n new tokens after `context` cached tokens."""
    g = torch.Generator().manual_seed(0)
    ctx = torch.randint(100, 20000, (1, context), generator=g)
    cache = model.new_cache(context + max(sizes) + 1)
    model(ctx, cache)
    cache.commit()
    out = {}
    for n in sizes:
        toks = torch.randint(100, 20000, (1, n), generator=g)
        times = []
        for _ in range(repeats + 1):
            _sync(model)
            t0 = time.perf_counter()
            model(toks, cache)
            _sync(model)
            times.append(time.perf_counter() - t0)
            cache.truncate(context)
        out[n] = statistics.median(times[1:])
    return out


def interpolate(curve: dict, n: float) -> float:
    """Piecewise-linear read of a measured {size: seconds} curve (clamped at its ends)."""
    xs = sorted(int(k) for k in curve)
    ys = [float(curve[k] if k in curve else curve[str(k)]) for k in xs]
    if n <= xs[0]:
        return ys[0]
    for (x0, y0), (x1, y1) in zip(zip(xs, ys), zip(xs[1:], ys[1:])):
        if n <= x1:
            return y0 + (y1 - y0) * (n - x0) / (x1 - x0)
    return ys[-1] + (ys[-1] - ys[-2]) * (n - xs[-1]) / (xs[-1] - xs[-2])


# ----------------------------------------------------------------------------- profiles
class _Recorder:
    """Wraps a drafter: keeps each proposed tree but hands the engine the root alone.

    The engine then decodes one token per round (vanilla speed and output), and every position
    of the output becomes a calibration sample for every tree size at once.
    """

    def __init__(self, inner):
        self.inner, self.trees = inner, []
        self.name, self.taps, self.sampled = inner.name, inner.taps, False

    def reset(self, context, taps):
        self.inner.reset(context, taps)

    def commit(self, processed, taps):
        self.inner.commit(processed, taps)

    def snapshot(self):
        return self.inner.snapshot()

    def restore(self, snap):
        self.inner.restore(snap)

    def propose(self, context, root, params, generator):
        from .tree import DraftTree

        self.trees.append(self.inner.propose(context, root, params, generator))
        return DraftTree(tokens=[int(root)], parents=[-1], q=[1.0])


def _chain(children: dict, cont: list[int]) -> list[int]:
    """Node ids along the target's own continuation, as far as the candidates reach."""
    out, node = [], 0
    for tok in cont:
        node = children.get((node, tok))
        if node is None:
            break
        out.append(node)
    return out


def dynamic_accepts(cands: list, cont: list[int], max_depth: int, n_max: int) -> list[list[int]]:
    """acc[d-1][N-1] = tokens a greedy walk accepts in the tree of N nodes and depth <= d."""
    depth = [0] * len(cands)
    children = {}
    for i in range(1, len(cands)):
        depth[i] = depth[cands[i][1]] + 1
        children.setdefault((cands[i][1], cands[i][2]), i)
    chain = _chain(children, cont[:max_depth])
    acc = [[0] * n_max for _ in range(max_depth)]
    for d in range(1, max_depth + 1):
        # same order as build_dynamic_tree's final selection: score desc, then index
        elig = sorted((i for i in range(1, len(cands)) if depth[i] <= d), key=lambda i: (-cands[i][0], i))
        rank = {i: r for r, i in enumerate(elig)}
        worst = -1
        for k, node in enumerate(chain[:d]):
            worst = max(worst, rank[node])  # a node stays only with all its ancestors
            for n in range(worst + 2, n_max + 1):  # kept when N - 1 > worst
                acc[d - 1][n - 1] += 1
    return acc


def collect_profile(target, method: str, prompts: list, max_new_tokens: int = 96, n_max: int = 64,
                    progress=None) -> dict:
    """Calibrate `method` (greedy) on `prompts` and return its tree profile."""
    from .drafters.eagle import EagleDrafter
    from .engine import SpeculativeDecoder
    from .methods import make_drafter

    inner = make_drafter(method, target, tree_size="paper")
    dynamic = isinstance(inner, EagleDrafter) and inner.tree_kind == "dynamic"
    if dynamic:
        inner.depth, inner.total_tokens = MAX_DEPTH, n_max
        acc_sum = [[0] * n_max for _ in range(MAX_DEPTH)]
    else:
        paths = inner.static_tree if isinstance(inner, EagleDrafter) else inner.tree
        # node k of a static tree is the k-th path in (length, path) order (tree.static_tree_shape)
        paths = sorted((list(p) for p in paths), key=lambda p: (len(p), p))
        count = [0] * (len(paths) + 1)
    rec = _Recorder(inner)
    samples = 0
    for j, prompt in enumerate(prompts):
        dec = SpeculativeDecoder(target, rec, seed=0, detail=False)
        dec.start(prompt, max_new_tokens)
        rec.trees = []
        dec.generate()
        gen = dec.generated
        ended = gen and gen[-1] in target.eos_ids
        horizon = MAX_DEPTH if dynamic else max(len(p) for p in paths)
        for s, tree in enumerate(rec.trees):
            cont = gen[s : s + horizon]
            if len(cont) < horizon and not ended:
                continue  # the continuation past the budget is unknown
            if dynamic and tree.candidates is None:
                continue  # a root-only tree (nothing to condition on yet)
            samples += 1
            if dynamic:
                a = dynamic_accepts(tree.candidates, cont, MAX_DEPTH, n_max)
                for d in range(MAX_DEPTH):
                    for n in range(n_max):
                        acc_sum[d][n] += a[d][n]
            else:
                children = {(tree.parents[i], tree.tokens[i]): i for i in range(len(tree) - 1, 0, -1)}
                for node in _chain(children, cont):
                    count[node] += 1
        if progress:
            progress(j + 1, len(prompts))
    if not samples:
        raise SpecVizError("No calibration samples: use longer generations or more prompts.")
    base = dict(method=method, samples=samples, prompts=len(prompts), max_new_tokens=max_new_tokens,
                date=dt.date.today().isoformat())
    if dynamic:
        tau = [[round(1 + a / samples, 4) for a in row] for row in acc_sum]
        return dict(base, kind="dynamic", top_k=inner.top_k, max_depth=MAX_DEPTH, n_max=n_max, tau=tau)
    order = sorted(range(1, len(paths) + 1), key=lambda i: (-count[i], i))
    tau = [1.0]
    for i in order:
        tau.append(round(tau[-1] + count[i] / samples, 4))
    return dict(base, kind="static", paths=[paths[i - 1] for i in order], tau=tau)


def load_profile(head_dir, method: str) -> dict | None:
    f = Path(head_dir) / PROFILE_FILE
    if not f.is_file():
        return None
    try:
        return json.loads(f.read_text()).get(method)
    except (OSError, ValueError):
        return None


def save_profile(head_dir, profile: dict) -> Path:
    f = Path(head_dir) / PROFILE_FILE
    data = json.loads(f.read_text()) if f.is_file() else {}
    data[profile["method"]] = profile
    f.write_text(json.dumps(data, indent=1))
    return f


# ----------------------------------------------------------------------------- drafting costs
@torch.no_grad()
def _draft_and_overhead(target, drafter, configure, configs, forward: dict, repeats: int = 3) -> tuple[dict, float]:
    """Median seconds of one `propose` per config, and the engine's fixed cost per round (round
    time minus drafting minus the measured `forward` curve)."""
    from .engine import SpeculativeDecoder
    from .examples import EXAMPLE_PROMPTS
    from .sampling import SamplingParams

    dec = SpeculativeDecoder(target, drafter, seed=0, detail=False)
    dec.start(EXAMPLE_PROMPTS[0], 64)
    rounds = [dec.step() for _ in range(3)]  # steady state: a few accepted tokens pending
    overhead = [max(0.0, r.total_time_s - r.draft_time_s - interpolate(forward, len(r.nodes))) for r in rounds[1:]]
    params = SamplingParams()
    out = {}
    for cfg in configs:
        configure(cfg)
        times = []
        for _ in range(repeats + 1):
            snap = drafter.snapshot()
            t0 = time.perf_counter()
            drafter.propose(dec.context, dec.root, params, dec.generator)
            _sync(target.model)
            times.append(time.perf_counter() - t0)
            drafter.restore(snap)
        out[cfg] = statistics.median(times[1:])
    return out, statistics.median(overhead)


def _cost_file(model) -> Path:
    from .loading import cache_root

    return cache_root() / "tuning" / f"{device_key(model)}.json"


def device_costs(target, method: str, profile: dict, remeasure: bool = False, log=None) -> dict:
    """Measured costs (seconds) for `method` on this device; cached after the first call."""
    model = target.model
    f = _cost_file(model)
    data = {}
    if f.is_file() and not remeasure:
        try:
            data = json.loads(f.read_text())
        except ValueError:
            data = {}
    changed = False
    if "forward" not in data:
        if log:
            log("measuring the target's forward cost for 1..64 tree tokens on this device (once)")
        data["forward"] = {str(n): t for n, t in forward_curve(model, GRID, context=256, repeats=3).items()}
        data["machine"], data["date"] = machine(), dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        changed = True
    key = f"draft.{method}"
    if key not in data:
        if log:
            log(f"measuring {method}'s drafting cost on this device (once)")
        from .methods import make_drafter

        drafter = make_drafter(method, target, tree_size="paper")
        if profile["kind"] == "dynamic":
            def configure(d):
                drafter.depth, drafter.total_tokens = d, profile["n_max"]

            configs = list(range(1, profile["max_depth"] + 1))
        else:
            attr = "static_tree" if hasattr(drafter, "static_tree") else "tree"

            def configure(n):
                setattr(drafter, attr, profile["paths"][: n - 1])

            configs = list(range(2, len(profile["paths"]) + 2))
        costs, overhead = _draft_and_overhead(target, drafter, configure, configs, data["forward"])
        data[key] = {str(k): v for k, v in costs.items()}
        data.setdefault("overhead", overhead)
        changed = True
    if changed:
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(json.dumps(data, indent=1))
    return data


# ----------------------------------------------------------------------------- the choice
def rank_trees(profile: dict, costs: dict, method: str) -> list[dict]:
    """Every candidate tree with its expected tau, seconds per round and tokens per second."""
    fwd, draft, over = costs["forward"], costs[f"draft.{method}"], float(costs["overhead"])
    out = []
    if profile["kind"] == "dynamic":
        for d in range(1, profile["max_depth"] + 1):
            for n in range(2, profile["n_max"] + 1):
                tau = profile["tau"][d - 1][n - 1]
                sec = over + float(draft[str(d)]) + interpolate(fwd, n)
                out.append(dict(depth=d, total_tokens=n, tau=tau, seconds=sec, tok_s=tau / sec))
    else:
        for n in range(2, len(profile["paths"]) + 2):
            tau = profile["tau"][n - 1]
            sec = over + float(draft[str(n)]) + interpolate(fwd, n)
            out.append(dict(total_tokens=n, tau=tau, seconds=sec, tok_s=tau / sec))
    return sorted(out, key=lambda r: -r["tok_s"])


def tuned_tree(target, method: str, head_dir=None, log=None) -> dict | None:
    """The best tree for `method` here (head folder: the shipped one by default), or None when
    the head ships no profile."""
    if head_dir is None:
        from .heads.io import shipped_head_dir
        from .methods import head_method

        head_dir = shipped_head_dir(target.model.name, head_method(method))
    profile = load_profile(head_dir, method)
    if profile is None:
        return None
    costs = device_costs(target, method, profile, log=log)
    best = rank_trees(profile, costs, method)[0]
    vanilla = 1.0 / (float(costs["overhead"]) + interpolate(costs["forward"], 1))
    best = dict(best, vanilla_tok_s=vanilla, kind=profile["kind"])
    if profile["kind"] == "static":
        best["paths"] = profile["paths"][: best["total_tokens"] - 1]
    else:
        best["top_k"] = profile["top_k"]  # the candidates were ranked with this many children per node
    return best


def tree_for(target, method: str, head_dir, tree_size) -> dict | None:
    """What a drafter factory uses: the tuned tree for `tree_size="auto"`, None for the papers'
    fixed trees (or when `target` is a bare model without the engine's tokenizer)."""
    if tree_size != "auto" or not hasattr(target, "tokenizer"):
        return None
    return tuned_tree(target, method, head_dir)


# ----------------------------------------------------------------------------- CLI
def main(argv=None) -> int:
    import argparse
    import sys

    ap = argparse.ArgumentParser(prog="python -m specviz.tuning", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("profile", help="calibrate the shipped heads' acceptance profiles (greedy, fp32)")
    p.add_argument("--methods", default="eagle1,eagle2,eagle3,medusa")
    p.add_argument("--limit", type=int, default=16, help="built-in prompts to calibrate on")
    p.add_argument("--max-new-tokens", type=int, default=96)
    p.add_argument("--threads", type=int, default=0)
    c = sub.add_parser("show", help="measure (or read) this device's costs and print the best trees")
    c.add_argument("--methods", default="eagle1,eagle2,eagle3,medusa")
    c.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    c.add_argument("--remeasure", action="store_true")
    c.add_argument("--threads", type=int, default=0)
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from tqdm import tqdm

    from .examples import EXAMPLE_PROMPTS
    from .heads.io import shipped_head_dir
    from .methods import head_method
    from .target import load_target

    try:
        if args.cmd == "profile":
            target = load_target(dtype=torch.float32)
            prompts = EXAMPLE_PROMPTS[: args.limit]
            for m in args.methods.split(","):
                bar = tqdm(total=len(prompts), desc=f"profile {m}", file=sys.stderr)
                prof = collect_profile(target, m, prompts, args.max_new_tokens,
                                       progress=lambda i, n: bar.update(1))
                bar.close()
                f = save_profile(shipped_head_dir(target.model.name, head_method(m)), prof)
                print(f"{m}: {prof['samples']} positions -> {f}")
        else:
            target = load_target(dtype={"fp32": torch.float32, "bf16": torch.bfloat16}[args.dtype])
            if args.remeasure:
                _cost_file(target.model).unlink(missing_ok=True)
            for m in args.methods.split(","):
                best = tuned_tree(target, m, log=lambda s: print(s, file=sys.stderr))
                if best is None:
                    print(f"{m}: no {PROFILE_FILE} for the shipped head; run `python -m specviz.tuning profile` first")
                    continue
                shape = f"depth {best['depth']}, " if "depth" in best else ""
                print(f"{m}: best {shape}{best['total_tokens']} nodes: expected tau {best['tau']:.2f}, "
                      f"{1000 * best['seconds']:.1f} ms/round -> {best['tok_s']:.1f} tok/s "
                      f"(vanilla {best['vanilla_tok_s']:.1f} tok/s, x{best['tok_s'] / best['vanilla_tok_s']:.2f})")
            print(f"costs cached in {_cost_file(target.model)}")
    except SpecVizError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
