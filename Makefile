# The README's commands. `make demo` and `make test` each set up .venv on first use.
VENV   ?= .venv
PY     := $(VENV)/bin/python
# The CPU build of torch (the file on this kind of machine's disk). On a GPU machine, install the
# CUDA build that fits it instead: make TORCH='torch==2.13.0' PIP_TORCH_FLAGS='--index-url ...'
TORCH  ?= torch==2.13.0
# The `fbgemm` extra (fbgemm-gpu-cpu 1.8.0, a 6 MB wheel, seconds to install) is part of the set-up so
# that CI exercises embedding.backend=fbgemm; it must match TORCH (see pyproject.toml). The `hf` extra
# (transformers: a 13 MB wheel, 126 MB installed, about 8 s) is too, so that CI tests `workload: hf`.
STAMP  := $(VENV)/.installed

.PHONY: install bytecode demo test test-fast lint bench-estimator mutation gpu-pack gpu-pack-check clean

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt examples/two_tower/pyproject.toml examples/sasrec/pyproject.toml \
		examples/digits/pyproject.toml examples/movie_ratings/pyproject.toml examples/ctr_models/pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(PIP_TORCH_FLAGS) "$(TORCH)"
	$(PY) -m pip install -q -c constraints.txt -e '.[dev,fbgemm,hf]'  # the tested versions
	# The example workload, installed as a user's package would be: `workload: two_tower`
	$(PY) -m pip install -q --no-deps --no-build-isolation -e examples/two_tower
	$(PY) -m pip install -q --no-deps --no-build-isolation -e examples/sasrec  # `workload: sasrec`
	$(PY) -m pip install -q --no-deps --no-build-isolation -e examples/digits  # `workload: digits`
	$(PY) -m pip install -q --no-deps --no-build-isolation -e examples/movie_ratings  # `workload: movie_ratings`
	$(PY) -m pip install -q --no-deps --no-build-isolation -e examples/ctr_models  # `workload: deepfm`, `dcn_v2`, `mmoe`
	touch $@

# elastune's own modules compiled once: where PYTHONDONTWRITEBYTECODE is set (this project's machines set it),
# Python would otherwise compile them again in every process it starts, each Ray trial included.
# Only what changed since the last run is compiled again.
bytecode: install
	$(PY) -m compileall -q platform examples jobs ui >/dev/null

# The main job on embedded defaults: the quick sweep on a local Ray, recorded in ./mlflow.db.
demo: install bytecode
	$(VENV)/bin/elastune sweep search_spaces/dlrm_quick.yaml

# Two workers: the integration packages and the unit-test files are spread over them as
# tests/conftest.py says (pytest_xdist_make_scheduler). A single test: .venv/bin/pytest PATH::NAME.
# The 25 slowest are listed at the end. The target is 15 minutes on two cores; it takes 21-23
# (CONTRIBUTING.md says where the time goes).
test: install lint bytecode
	$(PY) -m pytest -n 2 --durations=25

test-fast: install
	$(PY) -m pytest -n 2 -m "not integration and not slow"

lint: install
	$(VENV)/bin/ruff check platform jobs ui tests bench examples
	$(VENV)/bin/ruff format --check platform jobs ui tests bench examples
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

bench-estimator: install
	$(PY) bench/estimator.py

# Mutation testing (mutmut) of the pure core against its fast unit tests, in build/mutation/: each
# module's share of mutants not killed (target <= 10%), every survivor with why, and a bench record.
# About 6 minutes on two cores; `$(PY) bench/mutation.py --reuse` re-tests only what changed.
mutation: install
	$(PY) bench/mutation.py

# What bench/gpu.sh --pack installs on a GPU machine that has torch but no Ray, MLflow, Optuna or
# pydantic, and no package index: cp312 wheels in .gpu-pack/, under the 64 MiB a run carries.
gpu-pack: install
	$(PY) bench/gpu_pack.py

# That pack in a fresh Python 3.12 standing in for the GPU machine, and bench/gpu.sh's CPU dry run.
gpu-pack-check: gpu-pack
	bash bench/gpu_pack_check.sh

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
