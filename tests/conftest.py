"""Shared fixtures: the default model (loaded once per test session, cached on disk), the tiny
random models of tests/_tiny.py, and the headless app (Streamlit's AppTest).

Markers (pytest.ini): `slow` (end-to-end and statistical suites: the 32-prompt identities, the load test, the GPU-run rehearsal) and
`browser` (headless Chromium); `make test-fast` leaves both out, `make test` (CI) runs everything.
"""

import os
from pathlib import Path

import pytest
import torch

import _costs  # tests/_costs.py: the fixture costs the pages read
import _tiny  # tests/_tiny.py, importable because pytest.ini puts tests/ on the pythonpath

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
torch.manual_seed(0)

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def target(tuning_costs):
    """The default model, fp32 on the CPU, with the fixture costs installed for it (`tuning_costs`)."""
    from specviz.core.target import load_target

    model = load_target(dtype=torch.float32, device="cpu")
    if tuning_costs is not None:
        _costs.install(model, tuning_costs)
    return model


@pytest.fixture(scope="session", autouse=True)
def tuning_costs(tmp_path_factory):
    """Every test run reads fixture costs (tests/_costs.py) from a temporary `$SPECVIZ_TUNING_DIR`, which
    the app's subprocesses inherit: no page under test times trees on first use, and the user's own
    cached costs are neither read nor written. The `target` fixture installs the table for the default
    model. `SPECVIZ_TEST_COSTS=measured` (`make screenshots`) keeps the user's measured costs instead."""
    if os.environ.get("SPECVIZ_TEST_COSTS") == "measured":
        yield None
        return
    folder = tmp_path_factory.mktemp("tuning")
    before = os.environ.get("SPECVIZ_TUNING_DIR")
    os.environ["SPECVIZ_TUNING_DIR"] = str(folder)
    yield folder
    if before is None:
        os.environ.pop("SPECVIZ_TUNING_DIR", None)
    else:
        os.environ["SPECVIZ_TUNING_DIR"] = before


@pytest.fixture(scope="session")
def hf_model(target):
    """Hugging Face's own Llama on the very same weights: the reference for exactness."""
    from transformers import LlamaForCausalLM

    return LlamaForCausalLM.from_pretrained(str(target.folder), dtype=torch.float32).eval()


@pytest.fixture(scope="session")
def vanilla_greedy(target):
    """Our vanilla greedy output for the first 32 example prompts x 128 tokens, computed once:
    the reference every greedy speculative method must reproduce token for token. (32, not the 50
    it once was: on a 2-core AVX2 CPU each prompt costs ~1.4 s here and ~2.4 s in the PLD suite.)"""
    from specviz.core.engine import vanilla_generate
    from specviz.examples import EXAMPLE_PROMPTS

    return {p: vanilla_generate(target, p, 128).tokens for p in EXAMPLE_PROMPTS[:32]}


@pytest.fixture
def pinned_costs(monkeypatch):
    """Pin the tree tuner to a cost table, so its choice is a pure function of the shipped profile:
    the timing of the shortlist is stood in for by the model's own predictions (every tree counted
    as verifying as many tokens, so no tie is broken by size), and nothing is written to the user
    cache. `pinned_costs(costs)` returns a function giving a method's pick."""
    from specviz import tuning

    def pin(costs: dict):
        def predicted(target, drafter, profile, cands, prompts, max_new_tokens, params=None):
            vanilla = 1.0 / (float(costs.get("overhead", 0.0)) + tuning.interpolate(costs["forward"], 1))
            return ([dict(c, measured_tok_s=c["tok_s"], measured_tau=c["tau"], measured_nodes=1.0, speedup=c["tok_s"] / vanilla)
                     for c in cands],
                    dict(tok_s=vanilla))

        monkeypatch.setattr(tuning.pick, "device_costs", lambda *a, **k: costs)
        monkeypatch.setattr(tuning.pick, "time_candidates", predicted)
        monkeypatch.setattr(tuning.pick, "save_costs", lambda model, data: None)
        return lambda profile, method: max(tuning.shortlist(tuning.rank_trees(profile, costs, method)), key=lambda r: r["tok_s"])

    return pin


# ---------------------------------------------------------------------- the tiny random models
# Each fixture hands out the builder of tests/_tiny.py, so a test picks its own seed, device,
# dtype and sizes: `def test_x(tiny_target): model = tiny_target(seed=3)`. Nothing is downloaded.
@pytest.fixture(scope="session")
def tiny_config():
    """`tiny_config(hidden=64, vocab=128, layers=8)`: the ModelConfig of a tiny Llama (EOS id 1)."""
    return _tiny.tiny_config


@pytest.fixture(scope="session")
def tiny_target():
    """`tiny_target(seed=0, device="cpu", dtype=torch.float32, **config)`: a TargetModel with random
    weights (drawn on the CPU, so the same model on every device)."""
    return _tiny.tiny_target


@pytest.fixture(scope="session")
def tiny_target_bundle():
    """`tiny_target_bundle(seed=0, device="cpu", **config)`: a `Target` (tiny model + a tokenizer that
    writes token ids as numbers), for the engine."""
    return _tiny.tiny_target_bundle


@pytest.fixture(scope="session")
def tiny_data():
    """`tiny_data(folder, model, n_train=16, n_held=8, new=16, seed=0)`: training shards generated by
    a tiny model into `folder`."""
    return _tiny.tiny_data


# ---------------------------------------------------------------------- the app, headless
@pytest.fixture(scope="session")
def new_app(target):
    """`new_app(script="app.py", timeout=300, **query)`: the app (or one page script, e.g.
    "views/lesson.py") under Streamlit's AppTest, not yet run, with each keyword set as a query
    parameter (`new_app(method="pld")` opens ?method=pld). Call `.run()` on it. Depends on `target`
    so that the fixture costs are in place before a page reads them."""
    from streamlit.testing.v1 import AppTest

    def make(script: str = "app.py", *, timeout: float = 300, **query) -> AppTest:
        at = AppTest.from_file(str(ROOT / script), default_timeout=timeout)
        for k, v in query.items():
            at.query_params[k] = v
        return at

    return make


# ---------------------------------------------------------------------- the checkout stays clean
def _checkout_state() -> str | None:
    """`git status --porcelain` of the checkout (None outside a git work tree)."""
    import subprocess

    try:
        out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=ROOT, capture_output=True,
                             text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def pytest_sessionstart(session):
    session.config._specviz_checkout = _checkout_state()


def pytest_sessionfinish(session, exitstatus):
    """Tests write only to temporary or ignored folders: a run that changed what git sees in the
    checkout fails, naming the files (`make screenshots` is the command that rewrites shipped files)."""
    before = getattr(session.config, "_specviz_checkout", None)
    after = _checkout_state()
    if before is None or after is None or before == after:
        return
    changed = sorted(set(after.splitlines()) ^ set(before.splitlines()))
    session.config.get_terminal_writer().line(
        "FAILED: the tests changed the checkout (tests must write to temporary or ignored folders):\n  "
        + "\n  ".join(changed[:20]), red=True)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
