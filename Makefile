# The README's two commands: `make run` and `make test`. Both set up .venv first.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.ragline-installed
export HF_HUB_OFFLINE ?= 1
export TRANSFORMERS_OFFLINE ?= 1
export RAY_USAGE_STATS_ENABLED ?= 0
export TOKENIZERS_PARALLELISM ?= false

.PHONY: setup run test lint typecheck unit soak bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# The CPU build of torch lies on disk; installing it first stops pip pulling a CUDA build.
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[cpu,dev,onnx]"
	touch $(STAMP)

setup: $(STAMP)

run: setup
	$(VENV)/bin/ragline run

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports

typecheck: setup
	$(VENV)/bin/mypy

# Two workers (pytest-xdist): one test file per unit of work, the files that must not share the
# cores kept together on one worker (testkit/xdist_groups.py). WORKERS=0 runs in one process.
WORKERS ?= 2
test: lint typecheck
	$(PY) -m pytest -n $(WORKERS) --dist loadfile

# The fast tier: no PostgreSQL, Ray, or model loaded, trained or exported (those tests carry
# the integration mark, which tests/conftest.py enforces), nothing marked slow.
unit: setup
	$(PY) -m pytest tests/unit -m "not integration and not slow"

# The loops whose size is not itself the property, at full size (testkit/sizes.py): the suite
# runs them smaller. Results are recorded in docs/benchmarks.md ("make soak").
soak: setup
	RAGLINE_SOAK=1 $(PY) -m pytest -m soak --durations-file=soak-durations.tsv

clean:
	-$(VENV)/bin/ragline db down
	rm -rf .ragline
