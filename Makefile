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

.PHONY: run test test-all bench bench-throughput bench-streams install proto clean

run: $(STAMP)
	$(VENV)/bin/seedrl train examples/cartpole-vtrace.yaml --set metadata.name=$(RUN_NAME)

test: $(STAMP)
	$(PY) -m pytest -m "not slow" $(PYTEST_ARGS)

test-all: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

bench: bench-throughput bench-streams

# End-to-end against raw env steps and naive baselines, in one run (JSON beside the table).
bench-throughput: $(STAMP)
	$(PY) bench/throughput.py --config examples/cartpole-throughput.yaml --json bench-throughput.json

# Scaling over 1..32 actor streams, then the 1,000-stream scale simulation.
bench-streams: $(STAMP)
	$(PY) bench/streams.py --json bench-streams.json
	$(PY) bench/streams.py --streams 1000 --envs-per-stream 1 --seconds 20 --json bench-streams-1000.json

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
