# Set-up and everyday commands. `make demo` and `make test` need nothing but python3 (>= 3.10)
# with venv and pip: they build .venv inside the checkout and install pinned dependencies.
PYTHON ?= python3
VENV ?= .venv
# CPU build of torch; pip takes the local wheel where one lies on disk. On a CUDA machine use
# e.g. `make TORCH=torch==2.13.0 TORCH_INDEX=https://download.pytorch.org/whl/cu128 setup`.
TORCH ?= torch==2.13.0
TORCH_INDEX ?=
EXTRAS ?= offline-models,ct2,export,demo,dev
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup browser demo test test-fast test-deepspeed lint format docs constraints gpu-wheels gpu-check clean

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch first and pinned, or a dependency would pull a multi-GB CUDA build
	$(BIN)/python -m pip install -q $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) "$(TORCH)"
	$(BIN)/python -m pip install -q -c constraints.txt -e ".[$(EXTRAS)]"
	touch $(STAMP)

# The report's page tests (tests/report) open it in Debian's headless `chromium`: installed
# here when missing (root or sudo, apt); under `make test` a missing browser fails them.
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	  { echo "installing chromium for the report's page tests"; \
	    $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq chromium; }

demo: setup
	$(BIN)/fitwhisper demo

test: setup browser
	FITWHISPER_BROWSER_TESTS=required $(BIN)/python -m pytest

test-fast: setup browser
	FITWHISPER_BROWSER_TESTS=required $(BIN)/python -m pytest -m "not slow"

# The tests marked `deepspeed`, in a venv of their own with the optional extra: `make test`
# keeps testing the default install (once deepspeed is installed, transformers imports it in
# every run). DeepSpeed's C++ ops for the CPU (shared-memory communication, CPU Adam) are
# compiled once into that venv; a skipped DeepSpeed test fails the run (tests/conftest.py).
DS_VENV ?= .venv-deepspeed
# torch's JIT build runs `ninja` from PATH: the venv's (a dependency of deepspeed) when the
# machine has none; g++ comes from the machine.
DS_ENV := TORCH_EXTENSIONS_DIR=$(abspath $(DS_VENV))/torch_extensions \
	PATH="$(abspath $(DS_VENV))/bin:$$PATH"

test-deepspeed: $(DS_VENV)/.ops-built
	$(DS_ENV) FITWHISPER_DEEPSPEED_TESTS=required $(DS_VENV)/bin/python -m pytest -m deepspeed

$(DS_VENV)/.ops-built: pyproject.toml constraints.txt
	$(MAKE) setup VENV=$(DS_VENV) EXTRAS="$(EXTRAS),deepspeed"
	$(DS_ENV) $(DS_VENV)/bin/python -c "from deepspeed.accelerator import get_accelerator as a; \
	  [a().create_op_builder(n).load() for n in ('ShareMemCommBuilder', 'CPUAdamBuilder')]"
	touch $@

lint: setup
	$(BIN)/ruff check src tests $(wildcard bench)
	$(BIN)/ruff format --check src tests $(wildcard bench)

# The guide in docs/ (mkdocs.yml): --strict fails on a broken link or anchor and on a page
# missing from the nav. Offline: no plugin or font fetches anything. The variable silences
# the theme's banner about MkDocs 2.0.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir build/site

format: setup
	$(BIN)/ruff format src tests $(wildcard bench)
	$(BIN)/ruff check --fix src tests $(wildcard bench)

# Wheels (Python 3.12, manylinux) and the tiny.en tokenizer that bench/gpu_check.sh installs on a
# GPU machine with no network; fails if the folder is over 60 MiB.
gpu-wheels: setup
	$(BIN)/python bench/gpu_wheels.py --out .whl

# The GPU check here (CPU: CUDA-only steps are skipped); on a GPU machine: bench/gpu_check.sh
gpu-check: setup
	PYTHON=$(BIN)/python bash bench/gpu_check.sh --report bench/out/RESULTS-gpu-cpu.md

# Re-pin every dependency from a fresh environment (run after changing pyproject.toml).
constraints:
	rm -rf /tmp/fitwhisper-pin && $(PYTHON) -m venv /tmp/fitwhisper-pin
	/tmp/fitwhisper-pin/bin/python -m pip install -q --upgrade pip
	/tmp/fitwhisper-pin/bin/python -m pip install -q "$(TORCH)"
	/tmp/fitwhisper-pin/bin/python -m pip install -q -e ".[$(EXTRAS)]"
	{ echo "# Pinned versions for the set-up (pip install -c constraints.txt). Regenerate: make constraints"; \
	  /tmp/fitwhisper-pin/bin/python -m pip freeze --exclude-editable \
	  | grep -v -i -E '^(fitwhisper|pip|setuptools)==' | sed -E 's/^(torch==[^+]*)\+.*/\1/'; } > constraints.txt

clean:
	rm -rf $(VENV) $(DS_VENV) .pytest_cache .ruff_cache
