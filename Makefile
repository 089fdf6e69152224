# trident: the two entry points of a fresh Debian 12 machine are `make run` and `make test`.
# Both install missing packages first (scripts/install-deps.sh, idempotent).
BUILD   ?= build
BUILD_GPUSIM ?= build-gpusim
PRESET  ?=
JOBS    ?= $(shell nproc)
DECK    ?= input/tiny.toml
NP      ?= 1
ARGS    ?=
CTEST_ARGS ?=
# New build trees use Ninja (ninja-build, installed by scripts/install-deps.sh): on 2 cores it built the
# sanitizer tree in 517 s against 657 s with Makefiles (the same compiler work; Makefiles compile a
# target's sources only after the targets it depends on are built). CMake reads CMAKE_GENERATOR for a
# new tree only: a tree configured before keeps its generator. CMAKE_GENERATOR="Unix Makefiles" to choose.
export CMAKE_GENERATOR ?= Ninja

.PHONY: all deps test-deps configure build run test build-gpusim test-gpusim run-gpusim build-asan test-asan bench clean

all: build

deps:
	./scripts/install-deps.sh

# `make test` also installs what the Slurm tests (a local cluster), the run plots and the tokenizer
# tests (node and OpenAI's tiktoken from npm, the corpus' packages) need.
test-deps:
	TRIDENT_WITH_SLURM=1 TRIDENT_WITH_TEXT_TESTS=1 ./scripts/install-deps.sh

configure: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_ARGS)

build: configure
	cmake --build $(BUILD) -j$(JOBS)

# The main job: train the default deck. NP=4 DECK=... ARGS="--set mesh.dp=4" for other runs.
run: build
	$(if $(filter 1,$(NP)),,OPENBLAS_NUM_THREADS=1 )mpiexec -n $(NP) $(BUILD)/trident train $(DECK) $(ARGS)

# Unit, MPI, reference and fault tests (GPU tests skip, visibly, without a device), then the GPU tests
# on gpu-sim (label gpu-sim, build-gpusim/): both run, and either failing fails the target.
test: test-deps build build-gpusim
	ctest --test-dir $(BUILD) --output-on-failure -j$(JOBS) $(CTEST_ARGS); rc=$$?; \
	ctest --test-dir $(BUILD_GPUSIM) --output-on-failure -j$(JOBS) -L gpu-sim $(CTEST_ARGS) && exit $$rc

# gpu-sim (gpusim/README.md): the CUDA backend and the NCCL transport built for and run on the CPU,
# with the GPU tests only. `make run-gpusim` trains a deck on it (runtime.backend = "cuda").
build-gpusim: deps
	cmake -S . -B $(BUILD_GPUSIM) -DCMAKE_BUILD_TYPE=Release -DTRIDENT_GPU_SIM=ON -DTRIDENT_TEST_SET=gpu \
	  -DTRIDENT_BUILD_BENCHMARKS=OFF $(CMAKE_ARGS)
	cmake --build $(BUILD_GPUSIM) -j$(JOBS)

test-gpusim: build-gpusim
	ctest --test-dir $(BUILD_GPUSIM) --output-on-failure -j$(JOBS) -L gpu-sim $(CTEST_ARGS)

run-gpusim: build-gpusim
	OPENBLAS_NUM_THREADS=1 mpiexec -n $(NP) $(BUILD_GPUSIM)/trident train $(DECK) --set runtime.backend=cuda $(ARGS)

# The sanitizer stage of CI: unit and MPI tests under ASan + UBSan, in build-asan/ (docs/testing.md).
build-asan: deps
	JOBS=$(JOBS) ./scripts/sanitizer-tests.sh build-asan build

test-asan: build-asan
	JOBS=$(JOBS) ./scripts/sanitizer-tests.sh build-asan test

bench: build
	./benchmarks/run_all.sh $(BUILD)

clean:
	rm -rf $(BUILD) $(BUILD_GPUSIM) build-asan
