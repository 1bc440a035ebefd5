# gridsplit: the two set-up commands of the README.
#   make demo   install what is missing, build, bring up the default lab, measure across sites
#   make test   install what is missing, build, run every test (Rust, C, Python, lab integration)
#   make apps   install the applications of `gridsplit bench app --preset all` (LAMMPS, HPCC, mpi4py; docs/apps.md)
# Both are idempotent and stop at the first failing step with a message naming it.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PY ?= python3
# Cargo.toml's rust-version: the oldest Rust the locked dependencies build with.
RUST_MIN := 1.88
APT_PKGS := mpich libmpich-dev openmpi-bin libopenmpi-dev iperf3 ethtool iproute2 iputils-ping openssh-client dropbear-bin \
            util-linux hostname procps haproxy build-essential pkg-config tcpdump slurm-wlm
export GRIDSPLIT_LAB_PREFIX ?= gs

.PHONY: all deps build demo test test-rust test-c test-py clean apps
all: build

step = @printf '\n\033[1m== %s\033[0m\n' "$(1)"

deps:
	$(call step,dependencies: Debian packages; Rust toolchain; Python package)
	@if [ "$$(id -u)" != 0 ]; then echo "make: run as root (the lab creates network namespaces): sudo make ..." >&2; exit 1; fi
	@missing=$$(for p in $(APT_PKGS); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing: $$missing"; \
	  apt-get update -q >/dev/null || { echo "make deps: apt-get update failed; check the Debian mirror" >&2; exit 1; }; \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing >/dev/null || { echo "make deps: apt-get install failed for: $$missing" >&2; exit 1; }; \
	else echo "Debian packages: all present"; fi
	@fix="install a current toolchain with rustup (https://rustup.rs), or under sudo keep its PATH (sudo env PATH=\"\$$PATH\" make ...)"; \
	command -v cargo >/dev/null || { echo "make deps: no cargo in PATH; gridsplit needs Rust $(RUST_MIN) or newer; $$fix" >&2; exit 1; }; \
	v=$$( (rustc --version 2>/dev/null || true) | sed -n 's/^rustc \([0-9]*\.[0-9]*\).*/\1/p'); \
	if [ -z "$$v" ] || [ "$$(printf '%s\n' $(RUST_MIN) "$$v" | sort -V | head -n 1)" != "$(RUST_MIN)" ]; then \
	  echo "make deps: rustc $${v:-(not found)} is older than Rust $(RUST_MIN), which gridsplit's locked dependencies need; $$fix" >&2; exit 1; fi
	@$(PY) -m pip install -q --disable-pip-version-check --root-user-action=ignore -e '.[test]' \
	  || { echo "make deps: pip install of the gridsplit package failed" >&2; exit 1; }
	@echo "gridsplit CLI: $$(command -v gridsplit)"

build: deps
	$(call step,build: Rust daemons; C node library; MPI programs)
	cargo build --release --quiet
	$(MAKE) --no-print-directory -C mpi all
	$(MAKE) --no-print-directory -C bench/relay
	@if [ -f preload/Makefile ]; then $(MAKE) --no-print-directory -C preload all; fi

demo: build
	$(call step,demo: the paper's platform (MPI5000, Alter and Glück §10.2, scaled 10x) on this machine)
	gridsplit lab down
	gridsplit lab up --topology paper --nodes 8 --scale auto
	$(call step,demo: lab fidelity check)
	@gridsplit lab check || true  # a missed bound is explained, with its cause and what to do, by the check itself
	$(call step,demo: a reduced gather sweep (MPI5000 §10): MPI gathers from 4 and 8 bordeaux nodes to the sophia root; direct vs split)
	rm -f build/demo/gather.jsonl
	gridsplit bench gather --topology paper --nodes 4,8 --sizes 1K,100K,1M --impl openmpi --reps 50 --budget 3 \
	  --out build/demo/gather.jsonl
	@echo; echo "The lab stays up: gridsplit lab status | gridsplit lab exec HOST -- CMD | gridsplit lab down"
	@echo "The full sweep: gridsplit bench gather --repeat 3 (see docs/bench.md)"

test: build
	$(call step,tests: Rust)
	cargo test --release --quiet --workspace
	@if [ -f preload/Makefile ]; then printf '\n== tests: C node library\n'; $(MAKE) --no-print-directory -C preload test; fi
	$(call step,tests: MPI programs on one machine)
	$(MAKE) --no-print-directory -C mpi test
	$(call step,tests: Python (topology; CLI; lab integration with real namespaces and MPI))
	GRIDSPLIT_LAB_PREFIX=gst $(PY) -m pytest -q tests

# Not part of `make test`: Debian's lammps and hpcc (both Open MPI builds), installed by `deps` with
# these packages as its list, and mpi4py's source from PyPI built against each MPI into
# ~/.cache/gridsplit (or $GRIDSPLIT_CACHE), outside the source tree.
APP_PKGS := lammps hpcc
apps: deps
	$(call step,apps: the preset applications of gridsplit bench app (LAMMPS; HPCC; mpi4py's test suite))
	$(MAKE) --no-print-directory deps APT_PKGS="$(APP_PKGS)"
	gridsplit bench app --preset all --impl mpich,openmpi --prepare

clean:
	rm -rf build target
