#!/usr/bin/env bash
# Builds the fuzz preset (clang, libFuzzer, AddressSanitizer + UndefinedBehaviorSanitizer), makes the seed corpora
# (scripts/fuzz_corpus.py, from ../shared) and fuzzes each target for the given time, then prints one line per target:
# executions, coverage (libFuzzer's cov: edges and ft: features) and the result. A crash, sanitizer report, leak,
# input slower than the timeout or process over the memory limit stops that target; its input is saved under
# build/fuzz/tests/fuzz/artifacts/TARGET/ and the log's path printed. What each run adds to a corpus stays in
# build/fuzz/tests/fuzz/work/TARGET/, which later runs start from.
#
#   scripts/fuzz.sh                          # every target, 600 s each
#   scripts/fuzz.sh --time 120 gguf config   # two targets, two minutes each
#   scripts/fuzz.sh --parallel 2 --time 300  # two targets at a time
set -euo pipefail

ALL=(gguf safetensors llama2c ascent_file tokenizer_json sentencepiece llama2c_vocab jinja_parse jinja_render config)
TIME=600
PARALLEL=1
SHARED=${SHARED:-../shared}
targets=()
usage() {
  sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
  echo "targets: ${ALL[*]}"
  exit "$1"
}
while [ $# -gt 0 ]; do
  case "$1" in
    --time) TIME=$2; shift 2 ;;
    --parallel) PARALLEL=$2; shift 2 ;;
    -h | --help) usage 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; usage 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=("${ALL[@]}")
for t in "${targets[@]}"; do
  [[ " ${ALL[*]} " == *" $t "* ]] || { echo "fuzz.sh: no target '$t' (${ALL[*]})" >&2; exit 2; }
done
[[ "$TIME" =~ ^[0-9]+$ && "$TIME" -gt 0 ]] || { echo "fuzz.sh: --time $TIME is not a positive number of seconds" >&2; exit 2; }
[[ "$PARALLEL" =~ ^[0-9]+$ && "$PARALLEL" -gt 0 ]] || { echo "fuzz.sh: --parallel $PARALLEL is not a positive count" >&2; exit 2; }

cd "$(dirname "$0")/.."
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j "${JOBS:-$(nproc)}"
B=build/fuzz/tests/fuzz
/usr/bin/python3 scripts/fuzz_corpus.py --shared "$SHARED" --ascent build/fuzz/ascent --out "$B/corpus"

# The longest input libFuzzer makes for each target: above its largest seed, small enough that mutations land in
# the headers and tables the readers check rather than in weight data.
max_len() {
  case "$1" in
    gguf | safetensors | llama2c | ascent_file | tokenizer_json) echo 300000 ;;
    config) echo 65536 ;;
    sentencepiece) echo 100000 ;;
    *) echo 16384 ;;
  esac
}
dict() {
  case "$1" in
    gguf) echo "-dict=tests/fuzz/dicts/gguf.dict" ;;
    safetensors | ascent_file | tokenizer_json | config) echo "-dict=tests/fuzz/dicts/json.dict" ;;
    jinja_parse | jinja_render) echo "-dict=tests/fuzz/dicts/jinja.dict" ;;
  esac
}

run_one() {
  local t=$1 log="$B/logs/$1.log"
  mkdir -p "$B/work/$t" "$B/artifacts/$t" "$B/logs"
  local rc=0
  # -timeout: one input over 30 s is reported as a hang; -rss_limit_mb: the process (and -malloc_limit_mb, one
  # allocation) over 2 GB as a leak or a runaway allocation.
  "$B/fuzz_$t" -max_total_time="$TIME" -timeout=30 -rss_limit_mb=2048 -max_len="$(max_len "$t")" $(dict "$t") \
    -artifact_prefix="$B/artifacts/$t/" -print_final_stats=1 "$B/work/$t" "$B/corpus/$t" >"$log" 2>&1 || rc=$?
  local execs cov result
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]* ft: [0-9]*' "$log" | tail -1)
  if [ "$rc" -eq 0 ]; then
    result=ok
  else
    result=$(grep -m1 -o 'ERROR: [A-Za-z]*Sanitizer: [a-z-]*\|runtime error: .*\|ERROR: libFuzzer: [a-z-]*' "$log" || echo "exit $rc")
    result="FAILED ($result): $log"
  fi
  printf '%-15s execs %-10s %-22s %s\n' "$t" "${execs:-?}" "${cov:-cov: ?}" "$result"
  return "$rc"
}

failed=0
running=0
for t in "${targets[@]}"; do
  run_one "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$PARALLEL" ]; then
    wait -n || failed=1
    running=$((running - 1))
  fi
done
while [ "$running" -gt 0 ]; do
  wait -n || failed=1
  running=$((running - 1))
done
exit "$failed"
