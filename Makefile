# The short way in; CMake does the work (see CMakeLists.txt).
BUILD ?= build
JOBS  ?= $(shell nproc)
PROMPT ?= ROMEO:
FUZZ_SECONDS ?= 60
# extra CMake settings, e.g. CMAKE_ARGS=-DHR_WERROR=ON (CI sets it)
CMAKE_ARGS ?=

.PHONY: all deps run test asan fuzz bench clean
all: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_ARGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

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
	@CC=clang cmake -S . -B $(BUILD)-fuzz -DHR_FUZZ=ON -DHR_CUDA=OFF \
	  -DHR_MODULES="util;format;tokenizer" >/dev/null
	@cmake --build $(BUILD)-fuzz -j $(JOBS) --target fuzz_all
	scripts/fuzz.sh $(BUILD)-fuzz $(FUZZ_SECONDS)

clean:
	rm -rf $(BUILD) $(BUILD)-asan $(BUILD)-fuzz
