# The short way in; CMake does the work (see CMakeLists.txt).
BUILD ?= build
JOBS  ?= $(shell nproc)
PROMPT ?= ROMEO:
FUZZ_SECONDS ?= 60
# extra CMake settings, e.g. CMAKE_ARGS=-DHR_WERROR=ON (CI sets it)
CMAKE_ARGS ?=
# CUDA=ON builds the CUDA backend without a GPU here, CUDA=OFF never; unset:
# CMake's HR_CUDA (AUTO: when nvcc and a GPU are found)
CUDA ?=
CUDA_ARG = $(if $(CUDA),-DHR_CUDA=$(CUDA))

.PHONY: all deps run test asan fuzz bench clean
# Quiet: CMake's one headroom line (the CUDA backend, or why not), then no
# line per object or directory; warnings and errors still in full.
all: deps
	@mkdir -p $(BUILD)
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_RULE_MESSAGES=OFF \
	  $(CUDA_ARG) $(CMAKE_ARGS) > $(BUILD)/configure.log || { cat $(BUILD)/configure.log; exit 1; }
	@grep '^-- headroom:' $(BUILD)/configure.log || true
	@cmake --build $(BUILD) -j $(JOBS) -- --no-print-directory

deps:
	@scripts/deps.sh --check || scripts/deps.sh

run: all
	$(BUILD)/bin/headroom run -p "$(PROMPT)" -n 64

test: all
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

# -O1, as ASan's docs advise: test_embedded took 1018-1154 s of CI at -O0, 872 s at -O1
asan: deps
	@cmake -S . -B $(BUILD)-asan -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS_DEBUG="-g -O1" \
	  -DCMAKE_CXX_FLAGS_DEBUG="-g -O1" -DHR_SANITIZE=ON -DHR_CUDA=OFF $(CMAKE_ARGS) >/dev/null
	@cmake --build $(BUILD)-asan -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --test-dir $(BUILD)-asan --output-on-failure -j $(JOBS) -LE slow

fuzz: deps
	@CC=clang cmake -S . -B $(BUILD)-fuzz -DHR_FUZZ=ON -DHR_CUDA=OFF >/dev/null
	@cmake --build $(BUILD)-fuzz -j $(JOBS) --target fuzz_all
	scripts/fuzz.sh $(BUILD)-fuzz $(FUZZ_SECONDS)

clean:
	rm -rf $(BUILD) $(BUILD)-asan $(BUILD)-fuzz
