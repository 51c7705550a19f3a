# The two entry points of the README, and the steps they are made of. Every target sets up what
# it needs, so both work on a fresh clone: `make run` (the main job) and `make test`.
VENV   ?= .venv
PYTHON ?= python3
BIN    := $(VENV)/bin
export PATH := $(abspath $(BIN)):$(PATH)
# apt-get that waits for the package database's lock rather than failing at once: CI builds the
# image (which installs Docker) while `make test` installs chromium and qemu-user beside it.
APT    := apt-get -o DPkg::Lock::Timeout=600
# $(call apt_install,PACKAGES,WHAT GOES WITHOUT THEM) where apt works and runs as root: install,
# then once more after an update (a fresh machine's package lists may be stale); a warning, not a
# failure, when apt cannot, since the fallback or the failing tests say what is missing.
apt_install = if command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
	  $(APT) install -y -q $(1) >/dev/null \
	  || ($(APT) update -q >/dev/null && $(APT) install -y -q $(1) >/dev/null) \
	  || echo "apt could not install $(1); $(2)"; \
	fi

.PHONY: run test setup data browser emulator lint clean-results

## run: set everything up, then run the DVC pipeline on the default profile and print the table
## (with the bytecode cached as for `make test`: each stage is a process of its own, and where
## PYTHONDONTWRITEBYTECODE is set, each would compile torch's and mlflow's sources again, the
## first optimiser alone importing torch._dynamo for 20 to 30 s of CPU)
run: data
	$(BYTECODE_CACHE) dvc repro
	$(BYTECODE_CACHE) shdh results

## test: set everything up, then run the whole test suite, its files spread over TEST_WORKERS
## processes (pytest-xdist; a file's tests stay together, so its module fixtures run once), the
## files with slow tests first (tests/conftest.py), not xdist's most-tests-first order.
## Many tests wait on child processes (dvc, shdh, servers) or on a browser, and the suite runs
## each maths library on one thread (tests/conftest.py), so one worker more than two cores
## keeps both busy: 497.5 s on a 2-core Zen 4 with three, 522.0 s with two, the same hour
## (docs/benchmarks.md). TEST_WORKERS=0 runs everything in one process.
## The container tests (tests/containers) are not part of it: `make test-containers` runs them,
## and this target says whether they could run here.
## Bytecode is cached in the venv even where PYTHONDONTWRITEBYTECODE is set: without it every
## process the tests start (each dvc stage, each `shdh` command, each kfp.local task) compiles
## torch, mlflow and the rest from source again, 5 to 10 s of CPU each.
TEST_WORKERS ?= 3
BYTECODE_CACHE := PYTHONDONTWRITEBYTECODE= PYTHONPYCACHEPREFIX=$(abspath $(VENV))/pycache
test: data browser emulator
	$(BYTECODE_CACHE) $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder
	@if docker info >/dev/null 2>&1; then \
	  echo "container tests left out: run \`make test-containers\` (Docker answers here)"; \
	elif command -v dockerd >/dev/null || command -v apt-get >/dev/null; then \
	  echo "container tests left out: \`make test-containers\` installs and starts Docker, builds the image and runs them"; \
	else \
	  echo "container tests left out: no Docker engine here and no apt to install one"; \
	fi

## images: the runtime and the GPU image from the one Dockerfile, with no registry and no network
## inside the build (tools/images.py): Docker from Debian's packages and dockerd started
## where needed, a Debian base made with debootstrap (reused while its recipe is unchanged), a
## wheelhouse from requirements.lock, then `docker build` of each target, tagged
## localhost/shdh:VERSION and localhost/shdh:VERSION-cuda; images whose inputs did not change
## are reused. IMAGE_TARGETS=runtime builds one.
IMAGE_TARGETS ?= runtime gpu
.PHONY: images
images: setup
	$(BIN)/python -m tools.images build $(addprefix --target ,$(IMAGE_TARGETS))

## test-containers: the smoke profile's whole DAG in the runtime image (kfp.local's DockerRunner,
## UID 10001, read-only root) against a real MLflow server (basic auth) and SeaweedFS on loopback,
## compared with the same run without containers; and the train step killed and resumed from
## its S3 checkpoint (tests/containers). Docker that cannot start fails it where CI=true.
.PHONY: test-containers
test-containers: data
	$(MAKE) images IMAGE_TARGETS=runtime
	SHDH_TEST_CONTAINERS=1 $(BIN)/python -m pytest -p no:xdist tests/containers

## test-fast: the unit tests less the `slow` and `integration` ones, for the edit-test loop
## (about 3 minutes of CPU, spread over TEST_WORKERS processes as in `make test`; `make test`
## still runs everything, as CI does), with the bytecode cached as for `make test`.
.PHONY: test-fast
test-fast: setup
	$(BYTECODE_CACHE) $(BIN)/python -m pytest tests/unit -m "not slow and not integration" \
	  -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

## browser: Debian's chromium and chromium-driver for the MLflow UI test (tests/browser), via apt
browser:
	@{ command -v chromium && command -v chromedriver; } >/dev/null \
	  || { $(call apt_install,chromium chromium-driver,the MLflow UI test will fail) }

## emulator: Debian's qemu-user, which runs the CPU-vendor test's probe as an emulated Intel and
## AMD CPU (tests/unit/test_cpu_vendors.py), via apt
emulator:
	@command -v qemu-x86_64 >/dev/null \
	  || { $(call apt_install,qemu-user,the emulated-CPU tests will fail) }

## setup: the virtualenv with the pinned dependencies (requirements.lock) and the package
setup: $(VENV)/.installed

## The lock is installed by uv (pinned in the lock too), from the sources pip is configured with
## (tools/pip_sources.py): about 30 s, against 3.5 to 4 minutes for pip itself.
UV_VERSION := $(shell sed -n 's/^uv==//p' requirements.lock)
$(VENV)/.installed: requirements.lock pyproject.toml tools/pip_sources.py
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --no-compile uv==$(UV_VERSION)
	$(BIN)/uv pip install -q --python $(BIN)/python $$($(BIN)/python tools/pip_sources.py) \
	  -r requirements.lock
	$(BIN)/uv pip install -q --python $(BIN)/python --no-deps -e .
	touch $@

## data: Debian's dataset-fashion-mnist where apt works, then the verified raw files in data/
data: setup
	@[ -d /usr/share/datasets/fashion-mnist ] \
	  || { $(call apt_install,dataset-fashion-mnist,shdh fetch will try the official URLs) }
	shdh fetch

## dvc-deps: regenerate stage-code.json, the code each DVC stage runs, from the imports of the
## command it runs (tests/dvc_code_deps.py); the inputs stage hashes those files into the record
## each stage depends on. tests/unit/test_dvc_deps.py fails until this is run
.PHONY: dvc-deps
dvc-deps: setup
	$(BIN)/python -m tests.dvc_code_deps dvc.yaml stage-code.json

lint: setup
	$(BIN)/ruff check src tests benchmarks components pipelines tools
	$(BIN)/ruff format --check src tests benchmarks components pipelines tools

clean-results:
	rm -rf artifacts results mlflow.db mlflow.db-shm mlflow.db-wal mlflow.db.lock mlruns
