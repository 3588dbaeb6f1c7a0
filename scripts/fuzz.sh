#!/usr/bin/env bash
# Runs every libFuzzer target for a while over its seed corpus.
#   scripts/fuzz.sh BUILD_DIR SECONDS_PER_TARGET
# Seeds are copied to a scratch folder so the committed corpus is not
# rewritten. A crash leaves its input in BUILD_DIR/fuzz-out/ and fails.
set -euo pipefail
build=${1:?build dir}
secs=${2:-60}
root=$(cd "$(dirname "$0")/.." && pwd)
out="$build/fuzz-out"
mkdir -p "$out"
status=0
for bin in "$build"/bin/fuzz_*; do
  name=$(basename "$bin")
  corpus_name=${name#fuzz_}
  work="$out/$corpus_name"
  rm -rf "$work"
  mkdir -p "$work"
  if [[ -d "$root/tests/fuzz/corpus/$corpus_name" ]]; then
    cp -r "$root/tests/fuzz/corpus/$corpus_name/." "$work/"
  fi
  echo "fuzz: $name for ${secs}s"
  if ! "$bin" -max_total_time="$secs" -max_len=65536 -rss_limit_mb=2048 \
       -artifact_prefix="$out/$name-" "$work" > "$out/$name.log" 2>&1; then
    echo "fuzz: $name FAILED (see $out/$name.log)"
    tail -30 "$out/$name.log"
    status=1
  else
    tail -1 "$out/$name.log"
  fi
done
exit $status
