# trident: the two entry points of a fresh Debian 12 machine are `make run` and `make test`.
# Both install missing packages first (scripts/install-deps.sh, idempotent).
BUILD   ?= build
PRESET  ?=
JOBS    ?= $(shell nproc)
DECK    ?= input/tiny.toml
NP      ?= 1
ARGS    ?=
CTEST_ARGS ?=

.PHONY: all deps configure build run test bench clean

all: build

deps:
	./scripts/install-deps.sh

configure: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_ARGS)

build: configure
	cmake --build $(BUILD) -j$(JOBS)

# The main job: train the default deck. NP=4 DECK=... ARGS="--set mesh.dp=4" for other runs.
run: build
	$(if $(filter 1,$(NP)),,OPENBLAS_NUM_THREADS=1 )mpiexec -n $(NP) $(BUILD)/trident train $(DECK) $(ARGS)

# Unit, MPI, reference and fault tests (GPU tests skip, visibly, without a device).
test: build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS) $(CTEST_ARGS)

bench: build
	./benchmarks/run_all.sh $(BUILD)

clean:
	rm -rf $(BUILD)
