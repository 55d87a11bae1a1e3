"""Replicas behind nginx (`python -m specviz.serving.deploy`): the generated config (nginx -t), the launcher's
errors, and, marked slow, two real replicas behind a real nginx on 127.0.0.1: 20 load-test sessions
through it, each equal to its solo run and each kept on one replica by the routing cookie; a
headless browser's WebSocket through it (also marked browser); the command going on without a
dead replica, and stopped by SIGTERM.

Needs nginx (`bash scripts/nginx.sh`, run by `make test`): skipped without it, except in CI
($CI=true), where a missing nginx fails."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _load import check_load_result

from specviz import SpecVizError
from specviz.serving import deploy
from specviz.serving.deploy import Deployment, check_port, find_nginx, render_config
from specviz.serving.server import free_port

ROOT = Path(__file__).resolve().parent.parent
IN_CI = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


@pytest.fixture(scope="module")
def nginx():
    try:
        return find_nginx()
    except SpecVizError as e:
        if IN_CI:
            pytest.fail(f"CI must run the nginx tests: {e}")
        pytest.skip(f"{e} (the deploy tests need it; CI installs it with scripts/nginx.sh)")


# ------------------------------------------------------------------------------- fast
def test_config_balances_with_affinity_and_nginx_accepts_it(nginx, tmp_path):
    (tmp_path / "tmp").mkdir()
    text = render_config("127.0.0.1:18080", ["127.0.0.1:8601", "127.0.0.1:8602", "10.0.0.12:8501"], tmp_path)
    assert "{{" not in text
    upstream = text[text.index("upstream specviz {"):]
    upstream = upstream[: upstream.index("}")]
    assert re.findall(r"^\s*server (\S+)", upstream, re.M) == ["127.0.0.1:8601", "127.0.0.1:8602", "10.0.0.12:8501"]
    assert "hash $specviz_affinity consistent;" in upstream
    for line in ("proxy_http_version 1.1;", "proxy_set_header Upgrade $http_upgrade;",
                 "proxy_set_header Connection $connection_upgrade;", "proxy_set_header Host $http_host;",
                 "proxy_read_timeout 1h;", "listen 127.0.0.1:18080;", f"pid {tmp_path}/nginx.pid;"):
        assert line in text, line
    conf = tmp_path / "nginx.conf"
    conf.write_text(text)
    res = subprocess.run([nginx, "-t", "-p", str(tmp_path), "-c", str(conf)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert "test is successful" in res.stderr
    conf.write_text(text.replace("hash $specviz_affinity consistent;", "hash $specviz_affinity sometimes;"))
    bad = subprocess.run([nginx, "-t", "-p", str(tmp_path), "-c", str(conf)], capture_output=True, text=True)
    assert bad.returncode != 0  # nginx -t does check what it is given


def test_launcher_errors(monkeypatch, tmp_path):
    with pytest.raises(SpecVizError, match="no server"):
        render_config("127.0.0.1:18080", [], tmp_path)
    with pytest.raises(SpecVizError, match="no server"):
        Deployment(replicas=0)
    tpl = tmp_path / "t.conf"
    tpl.write_text("listen {{LISTEN}}; {{NEW_FIELD}}")
    with pytest.raises(SpecVizError, match="NEW_FIELD"):
        render_config("127.0.0.1:1", ["127.0.0.1:2"], tmp_path, template=tpl)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        with pytest.raises(SpecVizError, match="busy"):
            check_port("127.0.0.1", s.getsockname()[1])
    check_port("127.0.0.1", free_port())  # a free one passes
    monkeypatch.setattr(deploy.shutil, "which", lambda name: None)
    monkeypatch.setattr(deploy.os, "access", lambda path, mode: False)
    with pytest.raises(SpecVizError, match="apt-get install nginx"):
        find_nginx()


def test_replicas_share_one_servers_workers_and_cores(monkeypatch):
    monkeypatch.delenv("SPECVIZ_TORCH_THREADS", raising=False)
    monkeypatch.delenv("SPECVIZ_WORKERS", raising=False)
    # (cores, replicas, cuda) -> (workers, threads) per replica
    for cores, replicas, cuda, want in [(2, 1, False, (2, 1)), (2, 2, False, (1, 1)), (3, 2, False, (1, 1)),
                                        (4, 1, False, (1, 3)), (16, 2, False, (1, 7)), (16, 4, False, (1, 3)),
                                        (64, 100, False, (1, 1)), (16, 2, True, (4, 1))]:
        monkeypatch.setattr("specviz.serving.concurrency._cores", lambda c=cores: c)
        assert deploy.replica_settings(replicas, cuda=cuda) == want, (cores, replicas, cuda)
    monkeypatch.setattr("specviz.serving.concurrency._cores", lambda: 16)
    monkeypatch.setenv("SPECVIZ_WORKERS", "3")
    monkeypatch.setenv("SPECVIZ_TORCH_THREADS", "2")
    assert deploy.replica_settings(2) == (3, 2)  # the teacher's settings win
    monkeypatch.setenv("SPECVIZ_WORKERS", "none")
    with pytest.raises(SpecVizError, match="SPECVIZ_WORKERS"):
        deploy.replica_settings(2)


# ------------------------------------------------------------------------------- real replicas
@pytest.fixture(scope="module")
def deployment(nginx, tmp_path_factory, target):  # target: the fixture costs in place first
    """Two replicas (agent API on) behind nginx on 127.0.0.1; afterwards every process and its
    group must be gone, whatever happened in the tests."""
    d = Deployment(replicas=2, port=free_port(), host="127.0.0.1", agent_api=True,
                   run_dir=tmp_path_factory.mktemp("deploy"), timeout=300)
    try:
        d.start()
        yield d
    finally:
        d.stop()
        left = [name for name, proc, _ in d.procs if proc.poll() is None]
        for _name, proc, _ in d.procs:
            try:
                os.killpg(proc.pid, 0)
                left.append(f"process group {proc.pid}")
            except ProcessLookupError:
                pass
        assert not left, f"still running after stop: {left}"


def access_log(d: Deployment) -> list[dict]:
    rows = []
    for line in (d.run_dir / "access.log").read_text().splitlines():
        m = re.search(r'"(\S+) (\S+) [^"]*" (\d+) .*upstream=(\S+) route=(\S+)', line)
        if m:
            rows.append(dict(method=m[1], path=m[2], status=int(m[3]), upstream=m[4], route=m[5]))
    return rows


@pytest.mark.slow
def test_twenty_sessions_through_nginx_match_solo_runs(deployment, target, monkeypatch, capsys):
    """`specviz.serving.loadtest --url` through nginx: 20 sessions at once (start, next round x3, replay),
    every trace equal to the solo run's; both replicas serve; each session stays on one."""
    from specviz.serving.loadtest import run

    assert len(deployment.replica_urls) == 2
    monkeypatch.setenv("SPECVIZ_TORCH_THREADS", str(deployment.threads))  # the solo runs: the replicas' count
    res = run(deployment.url, 20, 3, 300, target=target)
    check_load_result(res, 20, 5, "through nginx, 2 replicas", capsys)

    rows = [r for r in access_log(deployment) if r["path"].startswith(("/_stcore/agent/", "/media/"))]
    replicas = {u.removeprefix("http://") for u in deployment.replica_urls}
    assert len(rows) >= 21 * 6  # each session: open, start, next x3, replay (+ its round files); the warm-up
    assert all(r["status"] == 200 for r in rows), [r for r in rows if r["status"] != 200][:3]
    assert all(r["route"] != "-" for r in rows)  # the page load before a session handed out the cookie
    by_route: dict[str, set] = {}
    for r in rows:
        by_route.setdefault(r["route"], set()).add(r["upstream"])
    assert len(by_route) == 21  # 20 sessions and the load test's warm-up, one cookie each
    assert all(len(ups) == 1 for ups in by_route.values()), by_route  # affinity: one replica a session
    assert set().union(*by_route.values()) == replicas  # and both replicas took sessions


@pytest.mark.slow
@pytest.mark.browser
def test_browser_websocket_through_nginx(deployment, tmp_path):
    """A headless Chromium opens the Decode page through nginx: the app renders over the proxied
    WebSocket, a click steps a round, and the socket was upgraded (101) on the cookie's replica."""
    chromium, driver = "/usr/bin/chromium", "/usr/bin/chromedriver"
    if not (Path(chromium).exists() and Path(driver).exists()):
        pytest.skip("headless Chromium not installed (scripts/browser.sh installs it)")
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                 "--disable-background-networking", "--window-size=1400,1600", f"--user-data-dir={tmp_path}",
                 "--host-resolver-rules=MAP specviz.test 127.0.0.1"):
        opts.add_argument(flag)
    drv = webdriver.Chrome(service=Service(driver), options=opts)
    drv.set_page_load_timeout(120)

    def shows(heading):  # the page has finished a run and shows `heading`
        state = drv.execute_script("const a=document.querySelector('.stApp');"
                                   "return a ? a.getAttribute('data-test-script-state') : null;")
        return state == "notRunning" and heading in [
            h.text for h in drv.find_elements(By.CSS_SELECTOR, '[data-testid="stMain"] h3')]

    def click(label):
        btn = [b for b in drv.find_elements(By.CSS_SELECTOR, '[data-testid="stMain"] button') if b.text.strip() == label]
        if not btn:
            return False
        drv.execute_script("arguments[0].scrollIntoView({block:'center'});", btn[0])
        btn[0].click()
        return True

    def wait(cond):  # the page redraws while we look: a vanished element is looked up again
        return WebDriverWait(drv, 120, poll_frequency=0.3, ignored_exceptions=[StaleElementReferenceException]).until(cond)

    try:
        prompt = "Copy this list three times: apples, pears, plums, cherries, grapes."
        # a name, as a class would use, not 127.0.0.1 (which Streamlit accepts as an Origin whatever the
        # Host): the WebSocket is accepted only if nginx passes the Host on with its port
        drv.get(f"http://specviz.test:{deployment.port}/decode?max_new=60&method=pld&temperature=0&seed=4&round=2&prompt={prompt.replace(' ', '+')}")
        wait(lambda _: shows("Round 2 of 2"))
        cookie = drv.get_cookie("specviz_route")
        assert cookie and re.fullmatch(r"[0-9a-f]{32}", cookie["value"]), cookie
        wait(lambda _: click("Next round"))
        wait(lambda _: shows("Round 3 of 3"))
        assert not drv.find_elements(By.CSS_SELECTOR, '[data-testid="stException"]')
        drv.get("about:blank")  # closes the WebSocket: nginx logs it now
    finally:
        drv.quit()
    deadline = time.time() + 10
    while time.time() < deadline:
        ws = [r for r in access_log(deployment) if r["path"].startswith("/_stcore/stream") and r["route"] == cookie["value"]]
        if ws:
            break
        time.sleep(0.5)
    assert ws, "no WebSocket with the routing cookie in nginx's log"
    assert {r["status"] for r in ws} == {101}
    same = {r["upstream"] for r in access_log(deployment) if r["route"] == cookie["value"]}
    assert len(same) == 1, same  # every request of this browser, the socket included, on one replica


@pytest.mark.slow
def test_command_survives_a_dead_replica_and_stops_on_sigterm(nginx, tmp_path):
    """`python -m specviz.serving.deploy --replicas 2`: when one replica dies it says so and nginx serves
    from the other; SIGTERM then stops everything: exit 0, no process left."""
    import urllib.request

    port = free_port()
    out = tmp_path / "out.log"
    with open(out, "w") as f:
        proc = subprocess.Popen([sys.executable, "-m", "specviz.serving.deploy", "--replicas", "2", "--port", str(port),
                                 "--host", "127.0.0.1", "--run-dir", str(tmp_path / "run")],
                                cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
    children = {}
    try:
        deadline = time.time() + 300
        while "serving on" not in out.read_text():
            assert proc.poll() is None, out.read_text()
            assert time.time() < deadline, out.read_text()
            time.sleep(0.5)
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
                cmd = (stat.parent / "cmdline").read_bytes()
            except OSError:
                continue
            if int(fields[1]) == proc.pid:  # its children: two replicas and nginx's master
                children[int(stat.parent.name)] = "nginx" if b"nginx" in cmd else "replica"
        assert sorted(children.values()) == ["nginx", "replica", "replica"], children
        victim = next(pid for pid, kind in children.items() if kind == "replica")
        os.killpg(victim, signal.SIGKILL)
        deadline = time.time() + 30
        while "warning: replica-" not in out.read_text():
            assert time.time() < deadline, out.read_text()
            time.sleep(0.5)
        for i in range(6):  # whichever replica a request hashes to, nginx answers from the live one
            req = urllib.request.Request(f"http://127.0.0.1:{port}/_stcore/health", headers={"User-Agent": f"ua-{i}"})
            with urllib.request.urlopen(req, timeout=10) as r:
                assert r.status == 200 and r.read() == b"ok"
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, out.read_text()
        assert "stopping" in out.read_text()
        time.sleep(0.5)
        left = [pid for pid in children if Path(f"/proc/{pid}").exists()]
        assert not left, left
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        for pid in children:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
