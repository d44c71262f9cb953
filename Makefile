# codeact — the whole set-up on a fresh machine is `make run` and `make test`.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
PYTEST_ARGS ?=
# `make clean` removes what dead codeact processes left; `make clean CLEANUP_ARGS=--all` also this
# user's live sessions (containers of codeact processes still running).
CLEANUP_ARGS ?=

.PHONY: install engine image run test test-bfcl lint bench mutate mutants clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q -U pip
	$(BIN)/pip install -q -e '.[dev,plots,ray]'
	touch $(STAMP)

install: $(STAMP)

# A Docker engine (installed from Debian's packages and started if none answers) and the image.
engine:
	./scripts/ensure-docker.sh

image: install engine
	$(BIN)/codeact image build

run: image
	$(BIN)/codeact exec examples/weather_action.py --tools examples/weather_tools.py
	@echo "--- the same run's structured result (codeact exec --json):"
	@$(BIN)/codeact exec examples/weather_action.py --tools examples/weather_tools.py --json | $(BIN)/python -m json.tool

# Two workers (pytest-xdist), a file each at a time: most tests wait on a sandbox or the engine, so
# two share two cores well; a file's module fixtures (a warm runtime, the Ray cluster) stay in one.
TEST_WORKERS ?= 2

test: image
	./scripts/ensure-chromium.sh
	./scripts/ensure-bwrap.sh
	./scripts/ensure-bfcl.sh
	./scripts/fetch-github-openapi.sh || echo 'make test: no GitHub OpenAPI description (npm unreachable?): its search-quality test skips'
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=25 $(PYTEST_ARGS)

# Every task of BFCL v4's four multi-turn categories scored against BFCL's checker (make test scores
# every 10th).
test-bfcl: image
	./scripts/ensure-bfcl.sh
	CODEACT_BFCL_FULL=1 $(BIN)/pytest -q tests/evals/test_evals_bfcl.py -k ground_truth

# Mutation testing of the pure-logic modules with their fast tests (scripts/mutation.toml; scores in
# docs/mutation.md), and the hand-made mutants of the pipeline (scripts/mutants.py). No Docker needed.
mutate: install
	$(BIN)/python scripts/mutate.py --jobs 2

mutants: install
	$(BIN)/python scripts/mutants.py

lint: install
	$(BIN)/ruff check codeact tests benchmarks examples
	$(BIN)/mypy codeact

bench: image
	./scripts/ensure-bwrap.sh  # the bwrap rows (without it they read n/a)
	$(BIN)/pip install -q -e '.[bench]'
	$(BIN)/python -m benchmarks.run

clean:
	-$(BIN)/codeact cleanup $(CLEANUP_ARGS)
	rm -rf $(VENV) *.egg-info .pytest_cache .mypy_cache .ruff_cache
