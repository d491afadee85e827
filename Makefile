# Entry points. `make demo` and `make test` each run setup first, so both work on a fresh Debian 12 machine: the demo
# installs and builds only what the program needs (configured without the tests, so no GoogleTest, unless build/release
# already has them), `make test` adds the test packages and targets.
SHARED ?= ../shared
JOBS ?= $(shell nproc)
# The program the demo runs (tests/e2e/test_demo.py runs demo-run with the build it tests).
ASCENT ?= build/release/ascent
# The kernel variants this CPU has must run: a test that skips one (a detection slip, a format falling back to the
# AVX2 kernel) fails instead of testing less. Set it empty to allow skips.
ASCENT_REQUIRE_ISA ?= $(shell sh scripts/required_isa.sh)
export ASCENT_REQUIRE_ISA

.PHONY: setup setup-test build-program build build-asan build-fuzz test test-release test-asan test-fuzz fuzz demo demo-run format \
	clean recipe

setup:
	bash scripts/setup.sh

setup-test:
	bash scripts/setup.sh --test

# A build folder already configured with the tests keeps them, and they are rebuilt with the program. Switching them
# off there would leave the last test build's binaries in place, and ctest would run them against the new program.
RELEASE_CACHE ?= build/release/CMakeCache.txt
PROGRAM_TESTING = $(shell grep -Eiqs '^BUILD_TESTING:BOOL=(ON|1|TRUE|YES|Y)$$' $(RELEASE_CACHE) && echo ON || echo OFF)
build-program: setup
	cmake --preset release -DBUILD_TESTING=$(PROGRAM_TESTING)
	cmake --build --preset release -j $(JOBS)

build: setup-test
	cmake --preset release -DBUILD_TESTING=ON
	cmake --build --preset release -j $(JOBS)

build-asan: setup-test
	cmake --preset asan -DBUILD_TESTING=ON
	cmake --build --preset asan -j $(JOBS)

test-release: build
	ctest --preset release -j $(JOBS)

test-asan: build-asan
	ctest --preset asan -j $(JOBS)

# The libFuzzer targets (clang) run once over their seed corpora and past findings; `make fuzz` fuzzes each for
# FUZZ_TIME seconds (scripts/fuzz.sh).
build-fuzz: setup-test
	cmake --preset fuzz
	cmake --build --preset fuzz -j $(JOBS)

test-fuzz: build-fuzz
	ctest --preset fuzz -j $(JOBS)

FUZZ_TIME ?= 600
fuzz: setup-test
	scripts/fuzz.sh --time $(FUZZ_TIME)

# The whole suite, in the release build and again under AddressSanitizer + UndefinedBehaviorSanitizer, and the fuzz
# targets over their corpora.
test: test-release test-asan test-fuzz

demo: build-program
	@$(MAKE) --no-print-directory demo-run

demo-run:
	@if [ -f $(SHARED)/models/stories260K/stories260K.bin ]; then \
	  $(ASCENT) generate -m $(SHARED)/models/stories260K/stories260K.bin \
	    --tokenizer $(SHARED)/models/stories260K/tok512.bin --temp 0 -n 128; \
	else \
	  echo "demo: $(SHARED)/models/stories260K is missing; run: $(ASCENT) generate -m MODEL -p 'Once upon a time'"; \
	  exit 1; \
	fi

# The training recipe (README: From text to a served model): the two corpora tokenized, examples/shakespeare-llama.yaml
# trained from scratch into runs/shakespeare-llama (a previous run there is removed first), its final validation loss
# checked against RECIPE_VAL_LOSS, and a generation from the checkpoint.
RECIPE_VAL_LOSS ?= 3.05
RECIPE_OUT = runs/shakespeare-llama
recipe: build-program
	$(ASCENT) data prepare --input $(SHARED)/corpora/tinyshakespeare.txt $(SHARED)/corpora/kjv-bible.txt \
	  --tokenizer $(SHARED)/models/story-656K --out runs/corpora-data
	rm -rf $(RECIPE_OUT)
	$(ASCENT) train examples/shakespeare-llama.yaml
	python3 -c 'import json, sys; v = [json.loads(l)["val_loss"] for l in open("$(RECIPE_OUT)/log.jsonl") if "val_loss" in l][-1]; \
	  print(f"recipe: final validation loss {v:.4f} (stated: at most $(RECIPE_VAL_LOSS))"); sys.exit(v > $(RECIPE_VAL_LOSS))'
	$(ASCENT) generate -m $(RECIPE_OUT)/checkpoints/step-00000600 -p "KING HENRY:" -n 60 --temp 0.8 --seed 1

format: setup-test
	clang-format -i $$(git ls-files '*.cc' '*.h')

clean:
	rm -rf build
