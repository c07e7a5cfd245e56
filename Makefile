# Set-up and checks. `make demo` and `make test` create .venv and install everything on a fresh machine.
VENV ?= .venv
PY := $(VENV)/bin/python
export PATH := $(abspath $(VENV))/bin:$(PATH)
# Without an NVIDIA GPU, take the local CPU build of torch; GPU users keep the torch they have or pip's choice.
HAS_GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo yes)
CONSTRAINTS := $(if $(HAS_GPU),,-c constraints/cpu.txt)
STAMP := $(VENV)/.amk-installed

.PHONY: install demo test lint lit pytest fuzz docs clean

$(STAMP): pyproject.toml constraints/cpu.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(CONSTRAINTS) -e '.[dev]'
	touch $@

install: $(STAMP)

demo: $(STAMP)
	$(PY) examples/gemm_bias_gelu_layernorm.py $(if $(HAS_GPU),,--small)

# import-linter reads a package from the file system, and amk.dialects, amk.passes and amk.lowering live in folders of
# their own (mapped into amk by pyproject.toml): the layers (.importlinter) are checked on a copy laid out as installed.
IMPORT_GRAPH := build/import-graph

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	rm -rf $(IMPORT_GRAPH) && mkdir -p $(IMPORT_GRAPH)
	cp -r amk $(IMPORT_GRAPH)/amk
	for folder in dialects passes lowering; do cp -r $$folder $(IMPORT_GRAPH)/amk/$$folder; done
	cd $(IMPORT_GRAPH) && PYTHONPATH=. $(abspath $(VENV))/bin/lint-imports --config $(CURDIR)/.importlinter

lit: $(STAMP)
	$(VENV)/bin/lit tests/filecheck -q

# worksteal: an idle worker takes tests queued on a busy one, so that a few long tests do not end the run alone;
# the slowest tests are listed at the end, to keep `make test` near ten minutes
pytest: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist worksteal --durations=20

# The long differential-fuzzing profile: 5,000 fresh random op chains, larger shapes, two workers (`make pytest` runs
# the fast, derandomized profile of 200). Each worker prints its count of cases at the end.
fuzz: $(STAMP)
	AMK_FUZZ_EXAMPLES=5000 AMK_FUZZ_RANDOM=1 $(PY) -m pytest tests/test_fuzz.py -n 2 -p no:cacheprovider

# The docs site, built strictly: broken links, missing anchors and pages left out of the nav fail.
docs: $(STAMP)
	$(VENV)/bin/mkdocs build --strict --site-dir site

test: lint lit pytest docs

clean:
	rm -rf $(VENV) build *.egg-info
