# seedrl: `make run` trains the default experiment, `make test` runs the tests.
# Both create .venv and install what they need on a fresh machine.

PYTHON ?= python3.11
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
# Reinstall when the dependency list changes.
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml constraints.txt | cksum | cut -d' ' -f1)
RUN_NAME ?= cartpole-vtrace-$(shell date +%Y%m%d-%H%M%S)
PYTEST_ARGS ?=

.PHONY: run test test-all bench install proto check-proto clean

run: $(STAMP)
	$(VENV)/bin/seedrl train examples/cartpole-vtrace.yaml --set metadata.name=$(RUN_NAME)

test: $(STAMP)
	$(PY) -m pytest -m "not slow" $(PYTEST_ARGS)

test-all: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

bench: $(STAMP)
	$(PY) bench/throughput.py

install: $(STAMP)

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml constraints.txt | $(PY)
	$(PIP) install --quiet -c constraints.txt -e ".[test,dev]"
	rm -f $(VENV)/.installed-*
	touch $@

# Regenerates the gRPC/protobuf stubs from common/seedrl.proto (they are committed).
proto: $(STAMP)
	$(PY) -m grpc_tools.protoc -I. --python_out=. --pyi_out=. --grpc_python_out=. common/seedrl.proto

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
