# The two commands of the README: `make app` and `make test` (all tests: CI's command).
# `make test-fast`, for contributors: all but the `slow` and `browser` tests (pytest.ini's markers).
.PHONY: setup app test test-fast bench

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

bench: setup
	.venv/bin/python -m specviz.bench --methods vanilla,hf --limit 5
