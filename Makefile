# The two commands of the README: `make app` and `make test` (all tests: CI's command).
# `make test-fast`, for contributors: all but the `slow` and `browser` tests (pytest.ini's markers).
# `make test-avx2`: the numerics tests with the AVX2 kernels on a CPU that also has AVX-512 (tests/test_isa.py).
# `make screenshots`: refresh assets/screenshots/ (the tests write theirs to out/screenshots/, ignored by git).
.PHONY: setup app test test-fast test-avx2 screenshots bench

setup:
	bash scripts/setup.sh

app: setup
	bash scripts/compiler.sh || echo "no C++ compiler: the runtime falls back to dense fp32 weights (slower)"
	.venv/bin/python -m streamlit run app.py

test: setup
	bash scripts/compiler.sh
	bash scripts/browser.sh
	bash scripts/nginx.sh
	.venv/bin/python -m pytest -q

test-fast: setup
	bash scripts/compiler.sh
	.venv/bin/python -m pytest -q -m "not slow and not browser"

test-avx2: setup
	bash scripts/compiler.sh
	.venv/bin/python -m pytest -q tests/test_isa.py  # its AVX2_ENV and NUMERICS_TESTS say what runs

screenshots: setup
	bash scripts/compiler.sh
	bash scripts/browser.sh
	SPECVIZ_SHOTS=assets/screenshots SPECVIZ_TEST_COSTS=measured .venv/bin/python -m pytest -q tests/test_browser.py

bench: setup
	.venv/bin/python -m specviz.bench --methods vanilla,hf --limit 5
