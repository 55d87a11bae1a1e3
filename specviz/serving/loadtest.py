"""Load test: many simultaneous sessions on one real SpecViz server, each checked against a solo run.

    python -m specviz.serving.loadtest --sessions 30 --method eagle3 --page decode

Starts `streamlit run app.py` on 127.0.0.1 (a free port) with Streamlit's agent API switched on
for this run only (`--server.enableAgentApi true`; the classroom config keeps it off). The agent
API drives a session without a browser through the same rerun and callback path as a click.
Every session opens the Decode page with its own settings (seed, prompt, greedy or sampled), then
all of them at once press Start, Next round x N and Replay. After each step the round trace is
fetched from the page's own "Download round as JSON" button, and must equal, byte for byte
(timing fields removed), the trace of a solo run with the same settings computed in this
process. Any error or exception element on a page fails the run. Prints p50/p95/max step
latency, and next to it the server's CPU time per step (all its threads, from /proc, when this
run started the server) and the engine's own time per round (from the traces' timing fields):
what is left of the CPU time is the page's Python.

The solo runs use the server's torch thread count (specviz.serving.concurrency.server_threads): float sums
depend on it. Loopback only: `--url` must point at 127.0.0.1/localhost. Bounded: at most 64 sessions, and
every request times out.
"""

from __future__ import annotations

import argparse
import http.cookiejar
import json
import logging
import os
import statistics
import sys
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..app.methods import APP_METHODS, make_drafter
from ..app.prompts import EXAMPLES, prompt_ids
from ..app.state import DEFAULTS, sampling_params
from .concurrency import server_threads
from ..core.engine import SpeculativeDecoder
from .server import streamlit_process
from ..core.target import load_target

TIMING_FIELDS = ("draft_time_s", "verify_time_s", "total_time_s")
MAX_SESSIONS = 64
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def canonical(trace_json: str | bytes) -> str:
    """A trace's JSON with timing fields removed, keys sorted: equal iff the rounds are equal."""
    d = json.loads(trace_json)
    for k in TIMING_FIELDS:
        d.pop(k, None)
    return json.dumps(d, sort_keys=True, ensure_ascii=False)


@dataclass
class Plan:
    index: int
    method: str
    temperature: float
    seed: int
    max_new: int
    prompt: str

    def query(self) -> dict:
        q = {"method": self.method, "temperature": f"{self.temperature:g}", "seed": str(self.seed),
             "max_new": str(self.max_new), "prompt": self.prompt}
        if self.temperature:
            q["top_p"] = "0.9"
        return {k: [v] for k, v in q.items()}

    def settings(self) -> dict:
        return dict(DEFAULTS, method=self.method, temperature=self.temperature, seed=self.seed, max_new=self.max_new,
                    top_p=0.9 if self.temperature else 1.0)


@dataclass
class Outcome:
    plan: Plan
    traces: list = field(default_factory=list)  # canonical JSON after each Next, then after Replay
    latencies: list = field(default_factory=list)  # (action, seconds)
    engine_s: list = field(default_factory=list)  # each fetched round's own total_time_s
    errors: list = field(default_factory=list)


def make_plans(n: int, rounds: int, method: str = "pld", max_new: int = 32) -> list[Plan]:
    prompts = EXAMPLES[:5]
    return [Plan(i, method, 0.8 if i % 2 == 0 else 0.0, 100 + i, max_new, prompts[i % len(prompts)]) for i in range(n)]


# ------------------------------------------------------------------------------- solo reference
def solo_traces(plan: Plan, rounds: int, target) -> list[str]:
    """The same sequence in this process, alone: rounds 1..N, then round N replayed."""
    s = plan.settings()
    dec = SpeculativeDecoder(target, make_drafter(plan.method, target, s), sampling_params(s), seed=plan.seed)
    dec.start(prompt_ids(target, plan.prompt), plan.max_new)
    out, snaps = [], []
    for _ in range(rounds):
        if dec.done:
            break
        snaps.append(dec.snapshot())
        out.append(canonical(dec.step().to_json()))
    dec.restore(snaps[-1])
    out.append(canonical(dec.step().to_json()))
    return out


# ------------------------------------------------------------------------------- agent client
class Client:
    """One simulated student. Like a browser it loads the page first and keeps its own cookies:
    behind nginx (`python -m specviz.serving.deploy`) the routing cookie that first response hands out
    keeps the session, and the files its page serves, on one replica."""

    def __init__(self, base: str, timeout: float):
        self.base = base.rstrip("/")
        self.url = self.base + "/_stcore/agent/interact"
        self.timeout = timeout
        self.sid = None
        self.last = None
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))

    def call(self, body: dict) -> dict:
        if self.sid:
            body = {"session_id": self.sid, **body}
        else:
            self.fetch(self.base + "/")
        req = urllib.request.Request(self.url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        try:
            with self.opener.open(req, timeout=self.timeout) as r:
                snap = json.load(r)
        except urllib.error.HTTPError as e:
            raise RuntimeError(f"HTTP {e.code}: {e.read()[:500]!r}") from None
        self.sid = snap.get("session_id", self.sid)
        self.last = snap
        return snap

    def fetch(self, rel: str) -> bytes:
        with self.opener.open(urllib.parse.urljoin(self.url, rel), timeout=self.timeout) as r:
            return r.read()


def _walk(node, out):
    if isinstance(node, dict):
        if "type" in node:
            out.append(node)
        for v in node.values():
            _walk(v, out)
    elif isinstance(node, list):
        for v in node:
            _walk(v, out)
    return out


def page_errors(snap: dict) -> list[str]:
    out = []
    for n in _walk(snap.get("tree"), []):
        if n.get("type") in ("error", "exception"):
            p = n.get("props") or {}
            out.append(str(p.get("body") or p.get("message") or p)[:300])
    return out


def trace_json(client: Client, snap: dict) -> bytes | None:
    """The round on the page, as its "Download round as JSON" button serves it."""
    for n in _walk(snap.get("tree"), []):
        if n.get("key") == "dl_json":
            url = (n.get("props") or {}).get("url")
            if url:
                return client.fetch(url)
    return None


# each page's presses: (action, widget key); only Decode's rounds are checked against solo runs
PAGES = {
    "decode": lambda rounds: [("start", "dec_start")] + [("next", "dec_next")] * rounds + [("replay", "dec_replay_btn")],
    "lesson": lambda rounds: [("next", "lesson_next")] * rounds,  # recorded rounds: no engine work at all
    "compare": lambda rounds: [("run", "cmp_run")] * rounds,  # every method on the prompt, one after the other
}


def drive(client: Client, plan: Plan, rounds: int, barrier: threading.Barrier, out: Outcome, page: str = "decode") -> None:
    try:
        snap = client.call({"page": page, "query_params": plan.query()})
        out.errors += page_errors(snap)
        barrier.wait(timeout=client.timeout)
        for action, key in PAGES[page](rounds):
            t0 = time.perf_counter()
            snap = client.call({"trigger": {"key": key}})
            out.latencies.append((action, time.perf_counter() - t0))
            if snap.get("status") == "error":
                out.errors.append(f"{action}: status {snap.get('status')}")
            out.errors += [f"{action}: {e}" for e in page_errors(snap)]
            if page == "decode" and action != "start":
                tj = trace_json(client, snap)
                if tj is None:
                    out.errors.append(f"{action}: no round trace on the page")
                else:
                    out.traces.append(canonical(tj))
                    out.engine_s.append(float(json.loads(tj).get("total_time_s") or 0.0))
    except threading.BrokenBarrierError:
        out.errors.append("another session failed before the start")
    except Exception as e:  # noqa: BLE001 - reported, not raised: the other sessions go on
        out.errors.append(f"{type(e).__name__}: {e}")
        try:
            barrier.abort()
        except Exception:  # noqa: BLE001
            pass


def cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU time of a process and all its threads (Linux /proc), or None."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def compare_with_solo(outcomes: list, rounds: int, target=None) -> list[str]:
    """Each error-free session's traces against a solo run of the same plan in this process."""
    if target is None:
        target = load_target(None)
    old_threads = torch.get_num_threads()
    torch.set_num_threads(server_threads())  # float sums depend on the thread count: match the server's
    try:
        refs = {o.plan.index: solo_traces(o.plan, rounds, target) for o in outcomes if not o.errors}
    finally:
        torch.set_num_threads(old_threads)
    mismatches = []
    for o in outcomes:
        if o.errors:
            continue
        ref = refs[o.plan.index]
        if o.traces != ref:
            first = next((i for i, (a, b) in enumerate(zip(o.traces, ref)) if a != b), min(len(o.traces), len(ref)))
            mismatches.append(f"session {o.plan.index} (seed {o.plan.seed}): trace {first + 1} of {len(ref)} differs from the solo run")
    return mismatches


def run(base: str, sessions: int, rounds: int, timeout: float, method: str = "pld", max_new: int = 32, target=None,
        server_pid: int | None = None, page: str = "decode") -> dict:
    host = urllib.parse.urlparse(base).hostname
    if host not in LOOPBACK:
        raise SystemExit(f"the load test only talks to loopback, not {host!r}")
    if not 1 <= sessions <= MAX_SESSIONS:
        raise SystemExit(f"--sessions must be 1..{MAX_SESSIONS}")
    plans = make_plans(sessions, rounds, method, max_new)
    # warm-up: the first session loads the model into the server's shared cache
    warm = Client(base, timeout)
    t0 = time.perf_counter()
    warm.call({"page": page})
    warm_s = time.perf_counter() - t0
    outcomes = [Outcome(p) for p in plans]
    barrier = threading.Barrier(sessions)
    threads = [threading.Thread(target=drive, args=(Client(base, timeout), p, rounds, barrier, o, page), daemon=True)
               for p, o in zip(plans, outcomes)]
    t0, cpu0, own0 = time.perf_counter(), cpu_seconds(server_pid), time.process_time()
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout * (rounds + 3))
    wall, cpu1, own1 = time.perf_counter() - t0, cpu_seconds(server_pid), time.process_time()
    stuck = [o.plan.index for o, th in zip(outcomes, threads) if th.is_alive()]

    mismatches = []
    if page == "decode":  # the other pages show recorded or whole-run results: nothing stepped to compare
        mismatches = compare_with_solo(outcomes, rounds, target)

    lat = sorted(s for o in outcomes for _, s in o.latencies)
    nxt = sorted(s for o in outcomes for a, s in o.latencies if a == "next")
    engine = [s for o in outcomes for s in o.engine_s]

    def pct(xs, q):
        return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))] if xs else float("nan")

    return {
        "sessions": sessions, "rounds": rounds, "method": method, "page": page, "wall_s": wall, "warmup_s": warm_s,
        "steps": len(lat), "p50_s": pct(lat, 0.5), "p95_s": pct(lat, 0.95), "next_p50_s": pct(nxt, 0.5), "next_p95_s": pct(nxt, 0.95),
        "max_s": lat[-1] if lat else float("nan"),
        "cpu_per_step_s": (cpu1 - cpu0) / len(lat) if lat and cpu0 is not None and cpu1 is not None else None,
        "engine_per_round_s": statistics.mean(engine) if engine else None,
        # the simulated students (HTTP, parsing each page's JSON) run on the same cores as the server
        "client_cpu_per_step_s": (own1 - own0) / len(lat) if lat else None,
        "errors": [f"session {o.plan.index}: {e}" for o in outcomes for e in o.errors],
        "stuck": stuck, "mismatches": mismatches,
        "ok": not stuck and not mismatches and not any(o.errors for o in outcomes),
    }


def _counts(steps):
    out = []
    for action, _ in steps:
        if out and out[-1][0] == action:
            out[-1][1] += 1
        else:
            out.append([action, 1])
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3, help="Next-round presses per session before the replay")
    ap.add_argument("--method", default="pld", choices=APP_METHODS, help="the decoding method every session uses")
    ap.add_argument("--page", default="decode", choices=list(PAGES),
                    help="decode: Start, Next round xN, Replay (each round checked against a solo run); "
                         "lesson: Next step xN (recorded rounds); compare: Run xN")
    ap.add_argument("--max-new", type=int, default=32)
    ap.add_argument("--timeout", type=float, default=300, help="seconds per request")
    ap.add_argument("--url", help="an already running server on loopback, started with --server.enableAgentApi true "
                                  "(or nginx in front of replicas: python -m specviz.serving.deploy --agent-api)")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    a = ap.parse_args(argv)
    logging.getLogger("streamlit").setLevel(logging.ERROR)
    if a.url:
        res = run(a.url, a.sessions, a.rounds, a.timeout, a.method, a.max_new, page=a.page)
    else:
        extra = ["--server.enableAgentApi", "true", "--server.agentWaitTimeout", str(int(a.timeout)),
                 "--server.agentMaxSessions", str(max(100, 2 * a.sessions + 2))]
        with streamlit_process(extra) as (url, proc):
            res = run(url, a.sessions, a.rounds, a.timeout, a.method, a.max_new, server_pid=proc.pid, page=a.page)
    if a.json:
        print(json.dumps(res, indent=2))
    else:
        presses = ", ".join(f"{a} x{n}" if n > 1 else a for a, n in _counts(PAGES[res["page"]](res["rounds"])))
        print(f"{res['sessions']} sessions on {res['page']} x ({presses}), method {res['method']}: "
              f"{res['steps']} steps in {res['wall_s']:.1f} s (model warm-up {res['warmup_s']:.1f} s)")
        print(f"step latency p50 {1000 * res['p50_s']:.0f} ms, p95 {1000 * res['p95_s']:.0f} ms, max {1000 * res['max_s']:.0f} ms "
              f"(next-round only: p50 {1000 * res['next_p50_s']:.0f} ms, p95 {1000 * res['next_p95_s']:.0f} ms)")
        cpu, eng = res["cpu_per_step_s"], res["engine_per_round_s"]
        print(f"server CPU per step {'n/a (not our server)' if cpu is None else f'{1000 * cpu:.0f} ms'}; "
              f"engine time per round {'n/a' if eng is None else f'{1000 * eng:.0f} ms'} (from the traces); "
              f"this client's CPU per step {1000 * (res['client_cpu_per_step_s'] or 0):.0f} ms (same cores)")
        for line in res["errors"] + res["mismatches"] + [f"session {i} did not finish" for i in res["stuck"]]:
            print("FAIL", line)
        print(("OK: every session matched its solo run byte for byte" if res["page"] == "decode" else "OK: no errors")
              if res["ok"] else "FAILED")
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
