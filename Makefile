# Entry points. `make demo` and `make test` each run setup first, so both work on a fresh Debian 12 machine.
SHARED ?= ../shared
JOBS ?= $(shell nproc)

.PHONY: setup build build-asan build-fuzz test test-release test-asan test-fuzz fuzz demo format clean

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

# The libFuzzer targets (clang) run once over their seed corpora and past findings; `make fuzz` fuzzes each for
# FUZZ_TIME seconds (scripts/fuzz.sh).
build-fuzz: setup
	cmake --preset fuzz
	cmake --build --preset fuzz -j $(JOBS)

test-fuzz: build-fuzz
	ctest --preset fuzz -j $(JOBS)

FUZZ_TIME ?= 600
fuzz: setup
	scripts/fuzz.sh --time $(FUZZ_TIME)

# The whole suite, in the release build and again under AddressSanitizer + UndefinedBehaviorSanitizer, and the fuzz
# targets over their corpora.
test: test-release test-asan test-fuzz

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
