# Quick start: `make study` runs the default study (tables, figures, summary); `make test` runs the tests.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# CPU build served from this machine's disk; GPU users: see README "Installing on a GPU machine"
TORCH ?= torch==2.13.0

.PHONY: setup test test-fast study demo benchmark gpu-check docs clean

setup: $(VENV)/.installed

# One line of its own; pip --quiet still prints its warnings and errors.
$(VENV)/.installed: pyproject.toml
	@echo "setup: $(VENV) with $(TORCH) and this project (extras test, eval, workflow, docs, bench, answers)"
	@$(PYTHON) -m venv $(VENV)
	@$(BIN)/pip install --quiet --upgrade pip
	@$(BIN)/pip install --quiet "$(TORCH)"
	@$(BIN)/pip install --quiet -e ".[test,eval,workflow,docs,bench,answers]"
	@touch $@

test: setup
	$(BIN)/python -m pytest

test-fast: setup
	$(BIN)/python -m pytest -m "not slow and not cluster"

CORES ?= 2
# another study: make study CONFIG=config/grid.yaml (merged over config/config.yaml; its results_dir
# key names the folder it writes, results/ by default)
CONFIG ?=
SNAKEMAKE := $(BIN)/snakemake --cores $(CORES) $(if $(CONFIG),--configfile $(CONFIG))
RESULTS_DIR = $(shell $(BIN)/python -c 'import sys, yaml; print(((yaml.safe_load(open(sys.argv[1])) if sys.argv[1:] else None) or {}).get("results_dir", "results").rstrip("/"))' $(CONFIG))

# On a failure, Snakefile's onerror names each failed job and its log (<results>/logs/failure.txt);
# it is printed again here, after Snakemake's four closing lines, so it is what the user reads last.
study: setup
	@rm -f $(RESULTS_DIR)/logs/failure.txt; SPECREJ_RESUME="make study$(if $(CONFIG), CONFIG=$(CONFIG))" $(SNAKEMAKE) \
		|| { status=$$?; echo >&2; cat $(RESULTS_DIR)/logs/failure.txt >&2 2>/dev/null; exit $$status; }
	$(SNAKEMAKE) --report $(RESULTS_DIR)/report.html
	@echo
	@echo "headline: $(RESULTS_DIR)/summary.md"
	@echo "report:   $(RESULTS_DIR)/report.html (every table and figure with its caption)"
	@echo "tables:   $(RESULTS_DIR)/tables/   figures: $(RESULTS_DIR)/figures/   runs: $(RESULTS_DIR)/runs/"

demo: setup
	$(BIN)/specrej generate --model default --reward logprob --method sr --alpha 0.5 \
		--memory-budget 64MiB --max-new-tokens 128 --prompts examples/prompts.json --out results/demo/sr.jsonl
	$(BIN)/specrej summary results/demo/sr.jsonl

# the engine benchmark (docs/results.md); BENCH_ARGS adds options, e.g. BENCH_ARGS="--batch-sizes 1,16 --repeats 1"
benchmark: setup
	$(BIN)/python benchmarks/engine_benchmark.py $(BENCH_ARGS)

# the GPU check (benchmarks/gpu_check.py): one report, results/gpu-check/report.{json,md}; GPU_CHECK_ARGS adds options
gpu-check: setup
	$(BIN)/python benchmarks/gpu_check.py $(GPU_CHECK_ARGS)

# the documentation site at http://127.0.0.1:8000, rebuilt on every edit (mkdocs.yml, docs/)
docs: setup
	$(BIN)/mkdocs serve

clean:
	rm -rf $(VENV) .pytest_cache results/demo
