"""The running app in a real headless Chromium (Selenium): every page opens, a round is clicked
through, no error element appears; screenshots go to out/screenshots/ (ignored by git), or to
$SPECVIZ_SHOTS: `make screenshots` refreshes the shipped ones in assets/screenshots/."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parent.parent
SHOTS = Path(os.environ.get("SPECVIZ_SHOTS", ROOT / "out" / "screenshots"))
SHIPPING = "SPECVIZ_SHOTS" in os.environ  # make screenshots: full settling time and the small palette PNGs
CHROMIUM, DRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"

if not (Path(CHROMIUM).exists() and Path(DRIVER).exists()):
    pytest.skip("headless Chromium not installed (scripts/browser.sh installs it)", allow_module_level=True)
webdriver = pytest.importorskip("selenium.webdriver")
from selenium.common.exceptions import TimeoutException  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(target):  # target: the fixture costs in place before the app reads them
    port = free_port()
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true", "--server.port", str(port),
         "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false"],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 90
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.5)
    if proc.poll() is not None:
        log.seek(0)
        pytest.fail("streamlit did not start:\n" + log.read())
    yield url
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()
    os.unlink(log.name)


@pytest.fixture(scope="module")
def browser():
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    profile = tempfile.mkdtemp(prefix="specviz-chrome-")
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--window-size=1500,1900",
                 f"--user-data-dir={profile}"):
        opts.add_argument(flag)
    drv = webdriver.Chrome(service=Service(DRIVER), options=opts)
    drv.set_page_load_timeout(120)
    yield drv
    drv.quit()
    shutil.rmtree(profile, ignore_errors=True)


def _state(drv) -> str:
    return drv.execute_script(
        "const a=document.querySelector('.stApp');"
        "return a ? a.getAttribute('data-test-script-state') : null;") or ""


def idle(drv, timeout=240):
    """Wait until the app has rendered and no script run is in progress (Streamlit marks the
    stApp element data-test-script-state=running|notRunning)."""
    WebDriverWait(drv, timeout).until(lambda d: d.find_elements(By.CSS_SELECTOR, '[data-testid="stMain"] h1'))
    end = time.time() + timeout
    quiet = 0
    while time.time() < end:
        quiet = quiet + 1 if _state(drv) == "notRunning" else 0
        if quiet >= 3:  # stable for ~0.9 s: reruns triggered by the last one have started by then
            time.sleep(0.5)  # let Plotly finish drawing
            return
        time.sleep(0.3)
    raise TimeoutException("app still running")


def no_errors(drv):
    exc = drv.find_elements(By.CSS_SELECTOR, '[data-testid="stException"]')
    assert not exc, exc[0].text[:2000]


def click_button(drv, label: str):
    btns = [b for b in drv.find_elements(By.CSS_SELECTOR, '[data-testid="stMain"] button') if b.text.strip() == label]
    assert btns, f"no button {label!r}"
    drv.execute_script("arguments[0].scrollIntoView({block:'center'});", btns[0])
    before = _main_text(drv)
    btns[0].click()
    try:  # the run starts, or a fast one has already changed the page (then there is nothing to wait for)
        WebDriverWait(drv, 5, poll_frequency=0.1).until(lambda d: _state(d) == "running" or _main_text(d) != before)
    except TimeoutException:
        pass


def _main_text(drv) -> str:
    return drv.execute_script(
        "const m=document.querySelector('[data-testid=\"stMain\"]'); return m ? m.innerText : '';") or ""


def shot(drv, name: str):
    """Screenshot of the whole page: the window grows to the content's height (Streamlit scrolls
    inside its main section, so a plain screenshot would stop at the fold), then shrinks back."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    h = drv.execute_script(
        "const m=document.querySelector('[data-testid=\"stMain\"]'); return m ? m.scrollHeight : 1900;") or 1900
    drv.set_window_size(1500, int(min(max(h + 80, 1000), 5000)))
    time.sleep(1.5 if SHIPPING else 0.7)  # let Plotly re-layout at the new size
    drv.save_screenshot(str(SHOTS / f"{name}.png"))
    drv.set_window_size(1500, 1900)
    time.sleep(0.5 if SHIPPING else 0.2)


def open_page(drv, url):
    drv.get(url)
    idle(drv)
    no_errors(drv)


def test_home(server, browser):
    open_page(browser, f"{server}/")  # every default: EAGLE-3, its CPU tree (path floor 0.25), the default prompt
    click_button(browser, "Generate")
    idle(browser)
    no_errors(browser)
    metrics = browser.find_elements(By.CSS_SELECTOR, '[data-testid="stMetricValue"]')
    assert len(metrics) == 5, "tau, tokens/s, vanilla tokens/s, speedup, rounds"
    shot(browser, "home")


def test_decode_round(server, browser):
    """Opened by a deep link (?round=2 replays two rounds), then stepped, clicked and staged.
    Seed 4 gives a drafted tree (9 nodes) in round 3 of this prompt: checked with the engine."""
    prompt = "Copy this list three times: apples, pears, plums, cherries, grapes."
    open_page(browser, f"{server}/decode?max_new=60&method=pld&temperature=0.7&seed=4&round=2&prompt={prompt.replace(' ', '+')}")
    heads = [h.text for h in browser.find_elements(By.CSS_SELECTOR, '[data-testid="stMain"] h3')]
    assert "Round 2 of 2" in heads, heads
    nav = [a.text for a in browser.find_elements(By.CSS_SELECTOR, '[data-testid="stSidebarNav"] a')]
    assert any("Decode round" in n for n in nav), nav  # the app's navigation, not bare page files
    click_button(browser, "Next round")
    idle(browser)
    no_errors(browser)
    assert "round=3" in browser.current_url
    # click a drafted node: its p-vs-q bars and ancestor highlight appear
    pts = browser.find_elements(By.CSS_SELECTOR, ".js-plotly-plot .scatterlayer .trace .points path")
    assert len(pts) > 2
    browser.execute_script("arguments[0].scrollIntoView({block:'center'});", pts[3])
    ActionChains(browser).move_to_element(pts[3]).pause(0.3).click().perform()
    idle(browser)
    no_errors(browser)
    strong = [m.text for m in browser.find_elements(By.CSS_SELECTOR, '[data-testid="stMarkdownContainer"] strong')]
    assert any(s.startswith("Selected node") for s in strong), strong
    shot(browser, "decode_draft")
    for stage, name in (("Verify", "decode_verify"), ("Accept", "decode_accept")):
        labels = [lab for lab in browser.find_elements(By.CSS_SELECTOR, '[data-testid="stMain"] label') if stage in lab.text]
        assert labels, stage
        labels[0].click()
        idle(browser)
        no_errors(browser)
        shot(browser, name)
    click_button(browser, "Replay this round")
    idle(browser)
    no_errors(browser)
    assert "identical trace: yes" in browser.find_element(By.CSS_SELECTOR, '[data-testid="stMain"]').text


def test_rule(server, browser):
    open_page(browser, f"{server}/rule")
    assert len(browser.find_elements(By.CSS_SELECTOR, ".js-plotly-plot")) >= 3
    shot(browser, "rule")


def test_free(server, browser):
    """"Measure forward latency" draws this machine's latency curve, absent before the click (the page's
    other plots show shipped or cached curves), over every pass size, and states its cost ratios."""
    open_page(browser, f"{server}/free")
    curve = ".st-key-free_curve_fig .js-plotly-plot"
    assert not browser.find_elements(By.CSS_SELECTOR, curve)
    click_button(browser, "Measure forward latency")
    idle(browser)
    no_errors(browser)
    xy = browser.execute_script("const p = document.querySelector(arguments[0]); return p && [p.data[0].x, p.data[0].y];", curve)
    assert xy, "no measured latency curve"
    assert [int(n) for n in xy[0]] == [1, 2, 4, 8, 16, 32, 64] and all(ms > 0 for ms in xy[1]), xy
    text = browser.find_element(By.CSS_SELECTOR, '[data-testid="stMain"]').text
    assert all(f"A pass of {n} tokens costs" in text for n in (4, 16, 64)), text[:2000]
    assert "Measured just now on this machine" in text
    shot(browser, "free")


def test_batch(server, browser):
    """"When speculation stops paying": the shipped throughput curve with its crossover line, the
    recorded batched round (three trees side by side, the block-diagonal mask), then the default
    live run (B = 1, 2, 4) drawn below."""
    open_page(browser, f"{server}/batch")
    shipped = ".st-key-batch_shipped_throughput .js-plotly-plot"
    xy = browser.execute_script("const p = document.querySelector(arguments[0]); return p && [p.data[0].x, p.data[0].y];", shipped)
    assert xy and xy[0][0] == "1" and all(v > 0 for v in xy[1]), xy
    assert browser.find_elements(By.CSS_SELECTOR, ".st-key-batch_rec_trees .js-plotly-plot")
    assert browser.find_elements(By.CSS_SELECTOR, ".st-key-batch_rec_mask .js-plotly-plot")
    assert "stops paying" in browser.find_element(By.CSS_SELECTOR, '[data-testid="stMain"]').text
    shot(browser, "batch")
    small_png("batch")
    live = ".st-key-batch_live_throughput .js-plotly-plot"
    assert not browser.find_elements(By.CSS_SELECTOR, live)
    click_button(browser, "Run it here")
    idle(browser, timeout=400)
    no_errors(browser)
    assert browser.find_elements(By.CSS_SELECTOR, live), "no live batched curve"


def test_lossless(server, browser):
    """The no-rejection bug, opened by a deep link, is run beside the correct rule: the correct rule
    passes and the bug's check fails, in red."""
    open_page(browser, f"{server}/lossless?variant=no-rejection")
    click_button(browser, "Run the check")
    idle(browser, timeout=400)
    no_errors(browser)
    strong = [s.text for s in browser.find_elements(By.CSS_SELECTOR, '[data-testid="stMarkdownContainer"] strong')]
    verdicts = [s.rsplit(": ", 1)[-1] for s in strong if s.startswith("Verdict (exact check and sampling test)")]
    assert verdicts == ["PASS", "FAIL"], strong  # the correct rule's column, then the bug's
    failed = [e.text for e in browser.find_elements(By.CSS_SELECTOR, '[data-testid="stAlertContentError"]')]
    assert any(e.startswith("FAIL: max |P_spec − P_target|") for e in failed), failed  # the exact check decides
    shot(browser, "lossless")


def test_compare(server, browser):
    open_page(browser, f"{server}/compare?max_new=32")  # the default prompt, methods and trees (each tuned here)
    # acceptance at equal trees: shipped, no run. Waited for: on a loaded machine the page can go idle
    # before Plotly has drawn (CI once found no plot there while other work shared the two cores)
    WebDriverWait(browser, 120).until(lambda d: d.find_elements(By.CSS_SELECTOR, ".js-plotly-plot"))
    shot(browser, "compare")
    for label, name in (("EAGLE-1 vs 2 vs 3", "compare_diff"), ("Speed on this machine", None)):
        WebDriverWait(browser, 60).until(lambda d: any(t.text.strip() == label for t in d.find_elements(By.CSS_SELECTOR, '[role="tab"]')))
        tabs = [t for t in browser.find_elements(By.CSS_SELECTOR, '[role="tab"]') if t.text.strip() == label]
        tabs[0].click()
        time.sleep(1)
        if name:
            shot(browser, name)
    click_button(browser, "Run comparison")
    idle(browser, timeout=400)
    no_errors(browser)
    shot(browser, "compare_speed")


def test_language_switch_in_browser(server, browser):
    open_page(browser, f"{server}/?lang=zh")
    h1 = browser.find_element(By.CSS_SELECTOR, '[data-testid="stMain"] h1').text
    assert "推测解码" in h1
    shot(browser, "home_zh")


def small_png(name: str):
    """Re-save a screenshot with a 256-colour palette: a quarter of the bytes, same picture (for the
    shipped ones only)."""
    if not SHIPPING:
        return
    try:
        from PIL import Image
    except ImportError:
        return
    path = SHOTS / f"{name}.png"
    Image.open(path).convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)


def lesson_steps(drv, lang: str, next_label: str):
    """Screenshot every lesson step; the page plays recorded rounds, so no step waits on the CPU."""
    n = len(LESSON_STEPS)
    for i in range(1, n + 1):
        heads = [h.text for h in drv.find_elements(By.CSS_SELECTOR, '[data-testid="stMain"] h2')]
        assert heads and heads[0], i
        name = f"lesson_{i:02d}" + ("" if lang == "en" else "_zh")
        shot(drv, name)
        small_png(name)
        if i < n:
            click_button(drv, next_label)
            idle(drv)
            no_errors(drv)


LESSON_STEPS = range(11)


def test_lesson(server, browser):
    """Every step of the lesson in English and Chinese, and a click on a tree node that lights up
    its row, its ancestors' columns and its path in the tree-attention step."""
    t0 = time.time()
    open_page(browser, f"{server}/lesson?lang=en")
    assert time.time() - t0 < 30, "the lesson's first screen must not wait on the engine"
    nav = [a.text for a in browser.find_elements(By.CSS_SELECTOR, '[data-testid="stSidebarNav"] a')]
    assert nav and "Lesson" in nav[0], nav  # first in the navigation
    assert browser.find_elements(By.CSS_SELECTOR, ".js-plotly-plot")
    lesson_steps(browser, "en", "Next")
    # back to step 3 (tree attention) through the step picker's Previous button, then click the deepest node
    for _ in range(len(LESSON_STEPS) - 3):
        click_button(browser, "Previous")
        idle(browser)
    assert "Tree attention" in browser.find_element(By.CSS_SELECTOR, '[data-testid="stMain"] h2').text
    pts = browser.find_elements(By.CSS_SELECTOR, ".js-plotly-plot .scatterlayer .trace .points path")
    assert len(pts) > 20  # the paper-sized tree
    browser.execute_script("arguments[0].scrollIntoView({block:'center'});", pts[-1])
    ActionChains(browser).move_to_element(pts[-1]).pause(0.3).click().perform()
    idle(browser)
    no_errors(browser)
    text = browser.find_element(By.CSS_SELECTOR, '[data-testid="stMain"]').text
    assert "Selected node #" in text and "→" in text, text[:1500]
    shot(browser, "lesson_03_clicked")
    small_png("lesson_03_clicked")
    open_page(browser, f"{server}/lesson?lang=zh")
    lesson_steps(browser, "zh", "下一步")


def test_spot_the_mistake(server, browser):
    """A case opened by a deep link: the student files it under a class, runs it, and sees the verdict and
    the evidence table; then the page in Chinese."""
    open_page(browser, f"{server}/mistakes?case=stale-feature")
    radios = [r for r in browser.find_elements(By.CSS_SELECTOR, '[data-testid="stRadio"] label') if r.text.strip() == "only slower"]
    assert radios, "no class to pick"
    radios[0].click()
    idle(browser)
    click_button(browser, "Lock in my answer and run it")
    idle(browser, timeout=400)
    no_errors(browser)
    ok = [e.text for e in browser.find_elements(By.CSS_SELECTOR, '[data-testid="stAlertContentSuccess"]')]
    assert any(s.startswith("Right: only slower") for s in ok), ok
    text = browser.find_element(By.CSS_SELECTOR, '[data-testid="stMain"]').text
    assert "The evidence shows: only slower" in text and "tau (tokens per target pass)" in text, text[:2000]
    shot(browser, "mistakes")
    open_page(browser, f"{server}/mistakes?lang=zh&case=uncached-baseline")
    assert "找错误" in browser.find_element(By.CSS_SELECTOR, '[data-testid="stMain"] h1').text
    shot(browser, "mistakes_zh")


def test_inside_the_drafter(server, browser):
    """Each tab of Inside the drafter in a real browser: the figures render (Plotly and Graphviz), no
    error; one screenshot per view, then the page in Chinese."""
    open_page(browser, f"{server}/inside")
    no_errors(browser)
    tabs = browser.find_elements(By.CSS_SELECTOR, '[data-testid="stTab"]')
    assert len(tabs) == 6, [t.text for t in tabs]
    names = ["inside_feature", "inside_expansion", "inside_fusion", "inside_ttt", "inside_vocab", "inside_ablations"]
    for tab, name in zip(tabs, names):
        tab.click()
        idle(browser)
        no_errors(browser)
        panel = browser.find_element(By.CSS_SELECTOR, '[data-testid="stTabs"] [role="tabpanel"]:not([hidden])')
        if name in ("inside_fusion", "inside_ttt"):
            assert panel.find_elements(By.CSS_SELECTOR, "svg"), name  # the Graphviz diagram drew
        if name != "inside_ablations" or "ablate" not in panel.text:
            assert panel.find_elements(By.CSS_SELECTOR, ".js-plotly-plot"), name
        shot(browser, name)
    open_page(browser, f"{server}/inside?lang=zh")
    assert "草稿器内部" in browser.find_element(By.CSS_SELECTOR, '[data-testid="stMain"] h1').text
    shot(browser, "inside_zh")
