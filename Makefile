# Quick start: `make study` runs the default study (tables, figures, summary); `make test` runs the tests.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# CPU build served from this machine's disk; GPU users: see README "Installing on a GPU machine"
TORCH ?= torch==2.13.0

.PHONY: setup test test-fast study demo benchmark docs clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet "$(TORCH)"
	$(BIN)/pip install --quiet -e ".[test,eval,workflow,docs]"
	touch $@

test: setup
	$(BIN)/python -m pytest

test-fast: setup
	$(BIN)/python -m pytest -m "not slow and not cluster"

CORES ?= 2

# On a failure, Snakefile's onerror names each failed job and its log (results/logs/failure.txt);
# it is printed again here, after Snakemake's four closing lines, so it is what the user reads last.
study: setup
	@rm -f results/logs/failure.txt; SPECREJ_RESUME="make study" $(BIN)/snakemake --cores $(CORES) \
		|| { status=$$?; echo >&2; cat results/logs/failure.txt >&2 2>/dev/null; exit $$status; }
	$(BIN)/snakemake --cores $(CORES) --report results/report.html
	@echo
	@echo "headline: results/summary.md"
	@echo "report:   results/report.html (every table and figure with its caption)"
	@echo "tables:   results/tables/   figures: results/figures/   runs: results/runs/"

demo: setup
	$(BIN)/specrej generate --model default --reward logprob --method sr --alpha 0.5 \
		--memory-budget 64MiB --max-new-tokens 128 --prompts examples/prompts.json --out results/demo/sr.jsonl
	$(BIN)/specrej summary results/demo/sr.jsonl

benchmark: setup
	$(BIN)/python benchmarks/engine_benchmark.py

# the documentation site at http://127.0.0.1:8000, rebuilt on every edit (mkdocs.yml, docs/)
docs: setup
	$(BIN)/mkdocs serve

clean:
	rm -rf $(VENV) .pytest_cache results/demo
