# The two commands of the README: `make app` and `make test`.
.PHONY: setup app test bench

setup:
	bash scripts/setup.sh

app: setup
	bash scripts/compiler.sh || echo "no C++ compiler: the runtime falls back to dense fp32 weights (slower)"
	.venv/bin/python -m streamlit run app.py

test: setup
	bash scripts/compiler.sh
	bash scripts/browser.sh
	.venv/bin/python -m pytest -q

bench: setup
	.venv/bin/python -m specviz.bench --methods vanilla,hf --limit 5
