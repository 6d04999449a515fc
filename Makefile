PYTHON ?= python3
PIP := $(PYTHON) -m pip

.PHONY: install test test-all test-gpu bench generate docs docs-tables clean

install:            ## install gemmgen (editable) with the test tools; PyTorch's CPU build if no torch
	$(PIP) install -q -e '.[dev]'
	$(PYTHON) -c "import torch" 2>/dev/null || $(PIP) install -q torch==2.13.0

test:               ## tests that need no GPU (nvcc compiles run where nvcc is installed)
	$(PYTHON) -m pytest -q -n auto --dist loadfile -m "not slow"

test-all:           ## every test that needs no GPU, the wider nvcc samples included
	$(PYTHON) -m pytest -q -n auto --dist loadfile

test-gpu:           ## tests that need a GPU and PyCUDA, spread over the GPUs; writes benchmarks/results/gpu-tests_<GPU>.json
	$(PYTHON) tests/run_gpu.py

bench:              ## run a benchmark suite on the GPU: make bench SUITE=ladder [ARGS="--quick"]
	@test -n "$(SUITE)" || { echo "usage: make bench SUITE=name (one of: $$(ls benchmarks/suites | sed -n 's/\.toml$$//p' | tr '\n' ' '))"; exit 2; }
	$(PYTHON) benchmarks/run.py $(SUITE) $(ARGS)

generate:           ## rewrite the presets' kernels in generated/ in place (other files there are kept)
	for p in $$($(PYTHON) -m gemmgen list --names); do $(PYTHON) -m gemmgen emit --preset $$p >/dev/null || exit 1; done
	ls generated

docs:               ## build the docs site (docs/ -> site/) with warnings as errors
	$(PIP) install -q -e '.[docs]'
	$(PYTHON) -m mkdocs build --strict

docs-tables:        ## regenerate the tables in README.md and docs/ from benchmarks/results
	$(PYTHON) -m gemmgen.tune.tables

clean:
	rm -rf build dist *.egg-info .pytest_cache .hypothesis site
