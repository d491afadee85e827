# Entry points. `make demo` and `make test` each run setup first, so both work on a fresh Debian 12 machine.
SHARED ?= ../shared
JOBS ?= $(shell nproc)
# The kernel variants this CPU has must run: a test that skips one (a detection slip, a format falling back to the
# AVX2 kernel) fails instead of testing less. Set it empty to allow skips.
ASCENT_REQUIRE_ISA ?= $(shell sh scripts/required_isa.sh)
export ASCENT_REQUIRE_ISA

.PHONY: setup build build-asan test test-release test-asan demo format clean

setup:
	bash scripts/setup.sh

build: setup
	cmake --preset release
	cmake --build --preset release -j $(JOBS)

build-asan: setup
	cmake --preset asan
	cmake --build --preset asan -j $(JOBS)

test-release: build
	ctest --preset release -j $(JOBS)

test-asan: build-asan
	ctest --preset asan -j $(JOBS)

# The whole suite, in the release build and again under AddressSanitizer + UndefinedBehaviorSanitizer.
test: test-release test-asan

demo: build
	@if [ -f $(SHARED)/models/stories260K/stories260K.bin ]; then \
	  ./build/release/ascent generate -m $(SHARED)/models/stories260K/stories260K.bin \
	    --tokenizer $(SHARED)/models/stories260K/tok512.bin --temp 0 -n 128; \
	else \
	  echo "demo: $(SHARED)/models/stories260K is missing; run: ./build/release/ascent generate -m MODEL -p 'Once upon a time'"; \
	fi

format:
	clang-format -i $$(git ls-files '*.cc' '*.h')

clean:
	rm -rf build
