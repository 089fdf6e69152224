# trident: the two entry points of a fresh Debian 12 machine are `make run` and `make test`.
# Both install missing packages first (scripts/install-deps.sh, idempotent).
BUILD   ?= build
PRESET  ?=
JOBS    ?= $(shell nproc)
DECK    ?= input/tiny.toml
NP      ?= 1
ARGS    ?=
CTEST_ARGS ?=

.PHONY: all deps test-deps configure build run test build-asan test-asan bench clean

all: build

deps:
	./scripts/install-deps.sh

# `make test` also installs what the Slurm tests (a local cluster) and the run plots need.
test-deps:
	TRIDENT_WITH_SLURM=1 ./scripts/install-deps.sh

configure: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_ARGS)

build: configure
	cmake --build $(BUILD) -j$(JOBS)

# The main job: train the default deck. NP=4 DECK=... ARGS="--set mesh.dp=4" for other runs.
run: build
	$(if $(filter 1,$(NP)),,OPENBLAS_NUM_THREADS=1 )mpiexec -n $(NP) $(BUILD)/trident train $(DECK) $(ARGS)

# Unit, MPI, reference and fault tests (GPU tests skip, visibly, without a device).
test: test-deps build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS) $(CTEST_ARGS)

# The sanitizer stage of CI: unit and MPI tests under ASan + UBSan, in build-asan/ (docs/testing.md).
build-asan: deps
	JOBS=$(JOBS) ./scripts/sanitizer-tests.sh build-asan build

test-asan: build-asan
	JOBS=$(JOBS) ./scripts/sanitizer-tests.sh build-asan test

bench: build
	./benchmarks/run_all.sh $(BUILD)

clean:
	rm -rf $(BUILD) build-asan
