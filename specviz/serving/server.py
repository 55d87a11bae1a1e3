"""Start the app on loopback for tests and the load test: a free port, a real Streamlit server,
waited for until its health check answers."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

from .. import SpecVizError

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def streamlit_server(extra_args=(), env: dict | None = None, timeout: float = 120):
    """Yield the base URL of `streamlit run app.py` bound to 127.0.0.1 on a free port; the
    server is stopped afterwards. `extra_args` are more `--section.option value` flags."""
    with streamlit_process(extra_args, env, timeout) as (url, _proc):
        yield url


@contextmanager
def streamlit_process(extra_args=(), env: dict | None = None, timeout: float = 120):
    """As `streamlit_server`, yielding (url, process): the load test reads the server's CPU time."""
    port = free_port()
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", prefix="specviz-server-", delete=False)
    cmd = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true", "--server.port", str(port),
           "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false", *extra_args]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + timeout
        while True:
            if proc.poll() is not None:
                log.seek(0)
                raise SpecVizError("streamlit did not start:\n" + log.read()[-4000:])
            try:
                with urllib.request.urlopen(url + "/_stcore/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.time() > deadline:
                raise SpecVizError(f"streamlit did not answer on {url} within {timeout:.0f} s")
            time.sleep(0.3)
        yield url, proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.close()
        if os.environ.get("SPECVIZ_KEEP_SERVER_LOG"):
            print("server log:", log.name, file=sys.stderr)
        else:
            os.unlink(log.name)
