"""Several SpecViz servers behind nginx, for a class that one Streamlit process serves too slowly.

    python -m specviz.serving.deploy --replicas 2 --port 8080                # students open http://<ip>:8080
    python -m specviz.serving.deploy --replicas 2 --port 8080 --agent-api    # also for `specviz.serving.loadtest --url`
    python -m specviz.serving.deploy --replicas 0 --port 8080 --upstream 10.0.0.12:8501 --upstream 10.0.0.13:8501
    python -m specviz.serving.deploy --replicas 2 --port 8080 --print-config  # the nginx.conf only; starts nothing

Starts N `streamlit run app.py` processes on 127.0.0.1 (free ports; the flags of
`.streamlit/config.toml`), waits until each answers /_stcore/health, writes deploy/nginx.conf.template
filled in to a run folder and runs nginx from the Debian package in the foreground with that folder as
its prefix (pid, logs and temp folders there, any user). nginx keeps each browser on one replica
(a routing cookie; the template says why) and passes the WebSocket upgrade on. `--upstream HOST:PORT`
adds servers already running elsewhere (`streamlit run app.py --server.address 0.0.0.0 --server.port
8501` on another machine). Ctrl-C or SIGTERM stops nginx and every replica. A replica that dies is
reported with the end of its log, and nginx sends its students to the others (their next
connection starts a new session there); when nginx or the last server dies, everything is stopped
and the command exits 1.

The agent API (scripted sessions over HTTP, what the load test drives) stays off unless
`--agent-api`; with it, each local replica is warmed (the model loaded) before nginx is reported
ready. The replicas share the machine as one server would: the engine workers one server would
run are shared out (at least one each), and so are the cores, max(1, (cores - 1) // (replicas x
workers)) torch threads each; `$SPECVIZ_WORKERS` and `$SPECVIZ_TORCH_THREADS` override both. A load
test's solo runs must use the replicas' thread count (the command prints the line to run).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from .. import SpecVizError
from .server import free_port

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "deploy" / "nginx.conf.template"
INSTALL_HINT = "install it with `sudo apt-get install nginx` (Debian/Ubuntu; or `bash scripts/nginx.sh`)"
AGENT_FLAGS = ["--server.enableAgentApi", "true", "--server.agentWaitTimeout", "300",
               "--server.agentMaxSessions", "130"]  # the load test's own server: 2 x 64 sessions + 2


def find_nginx() -> str:
    """The nginx binary (also /usr/sbin/nginx, which is not on a normal user's PATH)."""
    for cand in (shutil.which("nginx"), "/usr/sbin/nginx", "/usr/local/sbin/nginx"):
        if cand and os.access(cand, os.X_OK):
            return cand
    raise SpecVizError(f"nginx is not installed: {INSTALL_HINT}.")


def check_port(host: str, port: int) -> None:
    """Raise a SpecVizError when `port` cannot be listened on (SO_REUSEADDR, as nginx does)."""
    if not 1 <= port <= 65535:
        raise SpecVizError(f"--port must be 1..65535, got {port}.")
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except PermissionError:
            raise SpecVizError(f"port {port} needs root (ports below 1024): choose one above 1024 with --port.") from None
        except OSError as e:
            raise SpecVizError(f"port {port} on {host} is busy ({e.strerror}): stop what listens there "
                               f"(`ss -ltnp 'sport = :{port}'`) or choose another --port.") from None


def replica_settings(replicas: int, cuda: bool | None = None) -> tuple[int, int]:
    """(engine workers, torch threads) for each of `replicas` local replicas: one server's share
    of the machine. $SPECVIZ_WORKERS and $SPECVIZ_TORCH_THREADS win when set; else the workers one
    server would run are shared out (at least one each: on 2 cores, two replicas of one worker),
    and so are the cores (max(1, (cores - 1) // (replicas x workers)) threads)."""
    from .concurrency import default_workers, server_threads  # imports torch and streamlit: only sizing needs them

    replicas = max(1, replicas)
    if os.environ.get("SPECVIZ_WORKERS", "").strip():
        workers = default_workers()  # validates it
    else:
        workers = max(1, default_workers(cuda) // replicas)
    return workers, server_threads(workers * replicas)


def render_config(listen: str, servers: list[str], run_dir: Path | str, template: Path = TEMPLATE) -> str:
    """The nginx.conf for `servers` (host:port each), listening on `listen` (host:port)."""
    if not servers:
        raise SpecVizError("no server to balance: give --replicas 1 or more, or --upstream HOST:PORT.")
    lines = "\n".join(f"        server {s} max_fails=1 fail_timeout=10s;" for s in servers)
    text = template.read_text()
    for key, value in (("RUN_DIR", str(run_dir)), ("LISTEN", listen), ("SERVERS", lines)):
        text = text.replace("{{" + key + "}}", value)
    if "{{" in text:
        raise SpecVizError(f"{template} has a field this command does not fill: {text[text.index('{{'):][:40]!r}")
    return text


def _die_with_parent() -> None:  # runs in the child before exec: a SIGKILLed launcher leaves no orphan
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _get(url: str, timeout: float = 2.0) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status
    except OSError:
        return None


def _tail(path: Path, n: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return "(no log)"


class Deployment:
    """`with Deployment(replicas=2, port=8080) as d:` N replicas and nginx running; all stopped after."""

    def __init__(self, replicas: int = 2, port: int = 8080, host: str = "0.0.0.0", agent_api: bool = False,
                 upstream=(), run_dir: Path | str | None = None, timeout: float = 180):
        if replicas < 0 or replicas + len(upstream) < 1:
            raise SpecVizError("no server to balance: give --replicas 1 or more, or --upstream HOST:PORT.")
        self.replicas, self.port, self.host, self.agent_api = replicas, port, host, agent_api
        self.upstream, self.timeout = list(upstream), timeout
        self._own_dir = run_dir is None
        self.run_dir = Path(run_dir) if run_dir else Path(tempfile.mkdtemp(prefix="specviz-deploy-"))
        self.replica_urls: list[str] = []
        self.procs: list[tuple[str, subprocess.Popen, Path]] = []  # (name, process, log)
        self.workers, self.threads = replica_settings(replicas) if replicas else (None, None)
        self.failed = False

    @property
    def url(self) -> str:
        h = "127.0.0.1" if self.host in ("0.0.0.0", "") else "[::1]" if self.host == "::" else self.host
        return f"http://{h}:{self.port}"

    def _spawn(self, name: str, cmd: list[str], env: dict | None = None) -> subprocess.Popen:
        log = self.run_dir / f"{name}.log"
        with open(log, "w") as f:  # the child keeps its own descriptor
            proc = subprocess.Popen(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=env, start_new_session=True, preexec_fn=_die_with_parent)
        self.procs.append((name, proc, log))
        return proc

    def exited(self) -> dict[str, str]:
        """{name: message with the end of its log} for every process that has exited."""
        return {name: f"{name} exited with status {proc.returncode}; the end of {log}:\n{_tail(log)}"
                for name, proc, log in self.procs if proc.poll() is not None}

    def dead(self) -> str | None:
        """The message of the first process that has exited; None while all run."""
        return next(iter(self.exited().values()), None)

    def _wait(self, url: str, what: str) -> None:
        deadline = time.time() + self.timeout
        while _get(url) != 200:
            msg = self.dead()
            if msg:
                raise SpecVizError(f"{what} did not start: {msg}")
            if time.time() > deadline:
                raise SpecVizError(f"{what} did not answer {url} within {self.timeout:.0f} s (logs in {self.run_dir}).")
            time.sleep(0.3)

    def warm(self, url: str) -> None:
        """Open the Decode page once through the agent API: the replica loads the model now."""
        body = json.dumps({"page": "decode"}).encode()
        req = urllib.request.Request(url + "/_stcore/agent/interact", data=body, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                json.load(r)
        except (OSError, ValueError) as e:
            raise SpecVizError(f"the replica at {url} did not open the app: {e} (logs in {self.run_dir}).") from None

    def start(self) -> "Deployment":
        nginx = find_nginx()
        check_port(self.host, self.port)
        (self.run_dir / "tmp").mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "SPECVIZ_WORKERS": str(self.workers), "SPECVIZ_TORCH_THREADS": str(self.threads)}
        try:
            for i in range(self.replicas):
                port = free_port()
                cmd = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
                       "--server.address", "127.0.0.1", "--server.port", str(port),
                       "--browser.gatherUsageStats", "false", *(AGENT_FLAGS if self.agent_api else [])]
                self._spawn(f"replica-{i + 1}", cmd, env)
                self.replica_urls.append(f"http://127.0.0.1:{port}")
            for i, u in enumerate(self.replica_urls):
                self._wait(u + "/_stcore/health", f"replica {i + 1}")
            servers = [u.removeprefix("http://") for u in self.replica_urls] + self.upstream
            listen = f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"
            conf = self.run_dir / "nginx.conf"
            conf.write_text(render_config(listen, servers, self.run_dir))
            base = [nginx, "-p", str(self.run_dir), "-c", str(conf)]
            test = subprocess.run(base + ["-t", "-q"], capture_output=True, text=True)
            if test.returncode:
                raise SpecVizError(f"nginx refused {conf}:\n{test.stderr.strip()}")
            self._spawn("nginx", base)
            self._wait(self.url + "/_stcore/health", "nginx")
            if self.agent_api:
                for u in self.replica_urls:
                    self.warm(u)
        except BaseException:
            self.failed = True
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """nginx (graceful: SIGQUIT) and the replicas (SIGTERM) at once; SIGKILL to a process group
        still there after 10 s. Safe to call twice."""
        for name, proc, _ in reversed(self.procs):
            if proc.poll() is None:
                self._signal(proc, signal.SIGQUIT if name == "nginx" else signal.SIGTERM)
        for _name, proc, _ in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                pass
        for _name, proc, _ in self.procs:
            if proc.poll() is None or proc.returncode < 0:  # still there, or killed: its group may
                self._signal(proc, signal.SIGKILL)           # hold a child (nginx's worker) too
            if proc.poll() is None:
                proc.wait(5)
        if self._own_dir and not self.failed:
            shutil.rmtree(self.run_dir, ignore_errors=True)

    @staticmethod
    def _signal(proc: subprocess.Popen, sig: int) -> None:
        try:
            os.killpg(proc.pid, sig)  # each child leads its own session and group
        except (ProcessLookupError, PermissionError):
            pass

    def __enter__(self) -> "Deployment":
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.failed = True
        self.stop()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--replicas", type=int, default=2, help="SpecViz servers to start on this machine (default 2)")
    ap.add_argument("--port", type=int, default=8080, help="the port students open (default 8080)")
    ap.add_argument("--host", default="0.0.0.0", help="the address nginx listens on (default 0.0.0.0: the LAN)")
    ap.add_argument("--upstream", action="append", default=[], metavar="HOST:PORT",
                    help="a SpecViz server already running elsewhere, balanced with the local ones (repeatable)")
    ap.add_argument("--agent-api", action="store_true",
                    help="switch on Streamlit's agent API on the local replicas (for `specviz.serving.loadtest --url`); off by default")
    ap.add_argument("--run-dir", help="folder for nginx.conf, pid and logs (default: a new temporary folder)")
    ap.add_argument("--print-config", action="store_true", help="print the nginx.conf for these settings and exit")
    a = ap.parse_args(argv)

    if a.print_config:
        servers = [f"127.0.0.1:{8501 + i}" for i in range(a.replicas)] + a.upstream
        try:
            print(render_config(f"{a.host}:{a.port}", servers, Path(a.run_dir or "/tmp/specviz-deploy").resolve()))
        except SpecVizError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        return 0

    def stop_on(signum, _frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop_on)
    signal.signal(signal.SIGHUP, stop_on)
    d = None
    try:
        d = Deployment(a.replicas, a.port, a.host, a.agent_api, a.upstream, a.run_dir)
        print(f"starting {a.replicas} SpecViz replica(s) and nginx (logs in {d.run_dir}) ...", flush=True)
        d.start()
        print(f"serving on {a.host}:{a.port} -> {', '.join(d.replica_urls + a.upstream)}"
              + (f" ({d.workers} engine worker(s), {d.threads} torch thread(s) per local replica)" if a.replicas else ""))
        print(f"students open http://<this machine's address>:{a.port}  (`hostname -I`); Ctrl-C stops everything")
        if a.agent_api:
            print(f"load test: SPECVIZ_TORCH_THREADS={d.threads} .venv/bin/python -m specviz.serving.loadtest --url {d.url} --sessions 30")
        sys.stdout.flush()
        told = set()
        while True:
            gone = d.exited()
            for name in gone.keys() - told:
                told.add(name)
                d.failed = True  # keep the logs
                print(f"warning: {gone[name]}", file=sys.stderr, flush=True)
            if "nginx" in gone or (len(gone) == len(d.procs) - 1 and not a.upstream):
                print(f"error: nothing left to serve; stopping (logs kept in {d.run_dir})", file=sys.stderr)
                return 1
            time.sleep(1)
    except SpecVizError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("stopping ...", flush=True)
        return 0
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)  # a second Ctrl-C must not cut the cleanup short
        if d is not None:
            d.stop()


if __name__ == "__main__":
    sys.exit(main())
