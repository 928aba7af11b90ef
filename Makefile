# bytegrad developer tasks. Everything works from a fresh clone: each target builds the
# virtualenv it needs from the CPythons under $(PYENV_VERSIONS) and reinstalls bytegrad there
# only when pyproject.toml changed (a stamp file inside the venv records the last install).
#
#   make demo        train a small MLP on scikit-learn's digits (.venv, CPython 3.11)
#   make test        the test suite on CPython 3.11, 3.12 and 3.13, and on 3.11 under BYTEGRAD_TIER=numpy and =numba
#   make lint        ruff check bytegrad tests bench, and mypy (pyproject.toml: [tool.ruff], [tool.mypy]; .venv-3.11)
#   make test-long   the random-program test with many examples (LONG_EXAMPLES; ~10 min, CPython 3.11), and
#                    the second-order check of every real rule case (tests/rules/test_second_order.py)
#   make bench       the core benchmark, quick: small cases, a few minutes (.venv-bench, CPython 3.11)
#   make bench-full  all cases, time to first gradient, plots (bench/results/; long)
#   make bench-hotpath  fused kernels, precompile, TTFG, memory, import (bench/results/hotpath.md)
#   make bench-instructions  instructions per gradient under valgrind (bench/results/instructions.md)
#   make bench-compiled  every tier (general path, compiled programs, auto) beside the peers (bench/results/compiled.md)
#   make bench-realistic  realistic programs (ODE, RNN, attention, a model class, layers): gradient over forward, beside jax.jit (bench/results/realistic.md)
#   make bench-reach  the compiled tier's reach on 50 everyday programs apart from the catalogue (bench/results/reach.md)
#   make bench-checkpoint  peak memory and time per gradient with and without bytegrad.checkpoint (bench/results/checkpoint.md)
#   make bench-plots  redraw the committed plots in bench/results/ from the committed results (`python -m bench.plots`
#                    alone writes into bench/out/, not tracked)
#   make docs        regenerate docs/rules.md from the rule registry and build the site into site/
#                    (mkdocs build --strict: any warning fails; .venv-3.11)
#   make clean       caches, egg-info, bench scratch;  make distclean: also the venvs
#
# Variables: PYENV_VERSIONS (where to look for CPythons), PYTHON_VERSIONS, PYTEST_ARGS, TEST_EXTRAS, TIER_RUNS, LINT_PYTHON,
# BENCH_ARGS (bench.core), TTFG_ARGS (bench.ttfg), HOTPATH_ARGS, INSTRUCTIONS_ARGS, COMPILED_ARGS, CHECKPOINT_ARGS, REALISTIC_ARGS,
# PIP_QUIET (set it empty to see pip's output).

SHELL := /bin/bash
.SHELLFLAGS := -ec
.DEFAULT_GOAL := help

PYENV_VERSIONS ?= $(HOME)/.pyenv/versions
PYTHON_VERSIONS ?= 3.11 3.12 3.13
DEMO_PYTHON ?= 3.11
BENCH_PYTHON ?= 3.11
LONG_PYTHON ?= 3.11
LONG_EXAMPLES ?= 10000
LINT_PYTHON ?= 3.11
PYTEST_ARGS ?=
# the test venvs install the docs extra too: tests/test_docs.py builds the site; and lint (`make lint`)
TEST_EXTRAS ?= test,docs,lint
# `make test` also runs the suite on one CPython under each of these compiled tiers (bytegrad/compiled/policy.py)
TIER_RUNS ?= numpy numba
TIER_PYTHON ?= 3.11
BENCH_ARGS ?=
TTFG_ARGS ?=
PIP_QUIET ?= -qq

export PIP_DISABLE_PIP_VERSION_CHECK := 1

# $(call find_python,X.Y): sets the shell variable `py` to the newest
# $(PYENV_VERSIONS)/X.Y.*/bin/python, or fails with a message saying what is missing.
define find_python
py=$$(ls -d $(PYENV_VERSIONS)/$(1).*/bin/python 2>/dev/null | sort -V | tail -n 1); \
if [ -z "$$py" ] || ! "$$py" -c '' 2>/dev/null; then \
  echo "error: CPython $(1) not found: there is no $(PYENV_VERSIONS)/$(1).*/bin/python." >&2; \
  echo "       Install it (pyenv install $(1)) or point PYENV_VERSIONS at the folder holding it." >&2; \
  exit 1; \
fi
endef

# $(call venv_install,DIR,X.Y,EXTRAS): (re)creates DIR with CPython X.Y when it is missing or
# broken, then installs bytegrad editable with EXTRAS into it and touches the stamp ($@).
define venv_install
$(call find_python,$(2)); \
if ! $(1)/bin/python -c 'import sys; assert "%d.%d" % sys.version_info[:2] == "$(2)"' 2>/dev/null; then \
  echo "creating $(1) with $$py"; \
  rm -rf $(1); \
  "$$py" -m venv $(1); \
fi; \
echo "installing bytegrad[$(3)] into $(1)"; \
$(1)/bin/python -m pip install $(PIP_QUIET) -e '.[$(3)]'; \
touch $@
endef

.PHONY: help demo test test-long lint check-pythons bench bench-full bench-plots bench-hotpath bench-instructions bench-compiled bench-checkpoint bench-realistic bench-reach docs clean distclean

help:
	@sed -n '1,24s/^# \{0,1\}//p' Makefile

# ---------------------------------------------------------------------------------------- demo
.venv/.stamp-demo: pyproject.toml
	@$(call venv_install,.venv,$(DEMO_PYTHON),demo)

demo: .venv/.stamp-demo
	.venv/bin/python examples/train_mlp_digits.py

# ---------------------------------------------------------------------------------------- test
.venv-%/.stamp-test: pyproject.toml
	@$(call venv_install,.venv-$*,$*,$(TEST_EXTRAS))

# Every supported CPython must be there: a missing one is an error, never a skip.
check-pythons:
	@missing=""; \
	for v in $(PYTHON_VERSIONS); do \
	  ( $(call find_python,$$v) ) || missing="$$missing $$v"; \
	done; \
	if [ -n "$$missing" ]; then echo "make test: missing CPython:$$missing" >&2; exit 1; fi

# The venvs are made one at a time by a sub-make, so a venv removed or broken by hand is remade.
test: check-pythons
	@failed=""; \
	for v in $(PYTHON_VERSIONS); do \
	  .venv-$$v/bin/python -c '' 2>/dev/null || rm -f .venv-$$v/.stamp-test; \
	  $(MAKE) -s --no-print-directory .venv-$$v/.stamp-test; \
	  echo "=== pytest on CPython $$v ($$(.venv-$$v/bin/python -c 'import platform; print(platform.python_version())')) ==="; \
	  .venv-$$v/bin/python -m pytest -q -p no:cacheprovider $(PYTEST_ARGS) || failed="$$failed $$v"; \
	done; \
	for t in $(TIER_RUNS); do \
	  echo "=== pytest on CPython $(TIER_PYTHON) with BYTEGRAD_TIER=$$t (every gradient that can be a compiled program is one) ==="; \
	  BYTEGRAD_TIER=$$t .venv-$(TIER_PYTHON)/bin/python -m pytest -q -p no:cacheprovider $(PYTEST_ARGS) \
	    || failed="$$failed $(TIER_PYTHON)/BYTEGRAD_TIER=$$t"; \
	done; \
	if [ -n "$$failed" ]; then echo "make test: FAILED on CPython$$failed" >&2; exit 1; fi; \
	echo "make test: passed on CPython $(PYTHON_VERSIONS) (default tier), and on $(TIER_PYTHON) with BYTEGRAD_TIER=$(TIER_RUNS)"

# The hypothesis profile `long` (tests/conftest.py) replaces the bounded CI run; the statistics
# printed at the end say how many programs were tried and how many failed.
test-long:
	@$(call find_python,$(LONG_PYTHON))
	@.venv-$(LONG_PYTHON)/bin/python -c '' 2>/dev/null || rm -f .venv-$(LONG_PYTHON)/.stamp-test
	@$(MAKE) -s --no-print-directory .venv-$(LONG_PYTHON)/.stamp-test
	BYTEGRAD_HYPOTHESIS_PROFILE=long BYTEGRAD_LONG_EXAMPLES=$(LONG_EXAMPLES) BYTEGRAD_SECOND_ORDER=all \
	  .venv-$(LONG_PYTHON)/bin/python -m pytest -q -p no:cacheprovider --hypothesis-show-statistics \
	  tests/test_properties.py tests/rules/test_second_order.py $(PYTEST_ARGS)

# ---------------------------------------------------------------------------------------- lint
# Both run even when the first fails, so one pass shows every finding.
lint:
	@$(call find_python,$(LINT_PYTHON))
	@.venv-$(LINT_PYTHON)/bin/python -c '' 2>/dev/null || rm -f .venv-$(LINT_PYTHON)/.stamp-test
	@$(MAKE) -s --no-print-directory .venv-$(LINT_PYTHON)/.stamp-test
	@failed=""; \
	echo "=== ruff check bytegrad tests bench ==="; \
	.venv-$(LINT_PYTHON)/bin/python -m ruff check bytegrad tests bench || failed="$$failed ruff"; \
	echo "=== mypy ==="; \
	.venv-$(LINT_PYTHON)/bin/python -m mypy || failed="$$failed mypy"; \
	if [ -n "$$failed" ]; then echo "make lint: FAILED:$$failed" >&2; exit 1; fi; \
	echo "make lint: passed"

# --------------------------------------------------------------------------------------- bench
.venv-bench/.stamp-bench: pyproject.toml
	@$(call venv_install,.venv-bench,$(BENCH_PYTHON),bench)

# OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE, set on some machines for old OpenBLAS builds, slow down a
# current NumPy: the benchmark runs without them (core.json records the BLAS kernel in use).
BENCH_PY := env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv-bench/bin/python

# bench: bench/results/quick.md (+ .json); bench-full: core.md, ttfg.md (+ .json), ratios.png, ttfg.png
# (and compiled.png, from the compiled.json already there).
bench: .venv-bench/.stamp-bench
	$(BENCH_PY) -m bench.core --quick $(BENCH_ARGS)

bench-full: .venv-bench/.stamp-bench
	$(BENCH_PY) -m bench.core --full $(BENCH_ARGS)
	$(BENCH_PY) -m bench.ttfg $(TTFG_ARGS)
	$(BENCH_PY) -m bench.plots --committed

bench-plots: .venv-bench/.stamp-bench
	$(BENCH_PY) -m bench.plots --committed

# The hot-path report of issue 5 (fused kernels, precompile, time to first gradient, memory, import).
bench-hotpath: .venv-bench/.stamp-bench
	$(BENCH_PY) -m bench.hotpath $(HOTPATH_ARGS)

# Work per gradient without a clock: instruction counts under valgrind (needs valgrind on PATH).
bench-instructions: .venv-bench/.stamp-bench
	$(BENCH_PY) -m bench.instructions $(INSTRUCTIONS_ARGS)

# The compiled-programs report (bytegrad/compiled/policy.py): each tier as its own system, one run.
bench-compiled: .venv-bench/.stamp-bench
	$(BENCH_PY) -m bench.compiled $(COMPILED_ARGS)

# Realistic programs as users write them (issue 27): gradient time over the forward call, each tier, jax.jit.
bench-realistic: .venv-bench/.stamp-bench
	$(BENCH_PY) -m bench.realistic $(REALISTIC_ARGS)

# The compiled tier's reach on everyday programs (issue 27): which compile, every one checked against the general path.
bench-reach: .venv-bench/.stamp-bench
	$(BENCH_PY) -m bench.reach --out bench/results/reach

# The checkpointing report (bytegrad.checkpoint): the 2,000-step loop and the MLP, with and without.
bench-checkpoint: .venv-bench/.stamp-bench
	$(BENCH_PY) -m bench.checkpoint $(CHECKPOINT_ARGS)

# ---------------------------------------------------------------------------------------- docs
DOCS_PYTHON ?= 3.11

# The rules table is written to a temporary file first, so a failure leaves the committed table as
# it was. The site (mkdocs.yml) goes to site/; --strict turns every warning into a failure.
docs: .venv-$(DOCS_PYTHON)/.stamp-test
	.venv-$(DOCS_PYTHON)/bin/python -m bytegrad.rules.docs > docs/rules.md.tmp
	mv docs/rules.md.tmp docs/rules.md
	NO_MKDOCS_2_WARNING=1 .venv-$(DOCS_PYTHON)/bin/python -m mkdocs build --strict

# --------------------------------------------------------------------------------------- clean
clean:
	rm -rf build dist *.egg-info .hypothesis .pytest_cache .mypy_cache .ruff_cache bench/out site
	find . -path ./.git -prune -o -path './.venv*' -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf .venv .venv-bench $(foreach v,$(PYTHON_VERSIONS),.venv-$(v))
