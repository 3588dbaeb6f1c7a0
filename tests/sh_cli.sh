#!/usr/bin/env bash
# ctest-label: e2e
# The command line as a person uses it: help, tokenize, inspect, bench's
# repeated measurement, and every corrupt file of tests/fixtures/corrupt/
# refused with exit status 1, a message naming the file, and no crash.
#   tests/sh_cli.sh PATH_TO_HEADROOM BUILD_DIR
set -u
hr=$1
tmp=$2/sh_cli_tmp
mkdir -p "$tmp"
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

# --help on every command, exit 0
for c in "" run perplexity bench tokenize inspect plan convert; do
  if "$hr" $c --help > "$tmp/help.txt" 2>&1 && grep -q usage "$tmp/help.txt"; then ok; else bad "headroom $c --help"; fi
done
# unknown command and option: exit 1
"$hr" no-such-command > /dev/null 2>&1; [ $? -eq 1 ] && ok || bad "unknown command exit status"
"$hr" inspect --no-such-option > /dev/null 2>&1; [ $? -eq 1 ] && ok || bad "unknown option exit status"

# tokenize: Llama 2 ids of a known sentence (sentencepiece gives these)
vocab=tests/data/tokenizer-vectors/ggml-vocab-llama-spm.gguf
out=$(printf 'Hello world' | "$hr" tokenize -m "$vocab")
[ "$out" = "1 15043 3186" ] && ok || bad "tokenize with BOS: '$out'"
out=$(printf 'Hello world' | "$hr" tokenize -m "$vocab" --no-bos)
[ "$out" = "15043 3186" ] && ok || bad "tokenize --no-bos: '$out'"
out=$(printf 'Hello world' | "$hr" tokenize -m tests/data/llama2-tokenizer/tokenizer.model --no-bos)
[ "$out" = "15043 3186" ] && ok || bad "tokenize tokenizer.model: '$out'"

# inspect a real folder model
if "$hr" inspect -m tests/fixtures/models/qwen2-tied > "$tmp/inspect.txt" 2>&1 \
   && grep -q "architecture   qwen2" "$tmp/inspect.txt" && grep -q "q/k/v bias     yes" "$tmp/inspect.txt"; then ok
else bad "inspect qwen2-tied"; cat "$tmp/inspect.txt"; fi

# every corrupt file: status 1 (not a crash: >= 128), message naming the file
for f in tests/fixtures/corrupt/*; do
  case "$f" in
    *.gguf) cmd=(inspect -m "$f") ;;
    *.safetensors) d="$tmp/st"; rm -rf "$d"; mkdir -p "$d"
                   cp tests/fixtures/models/llama-gqa/config.json "$d/"
                   cp "$f" "$d/model.safetensors"; cmd=(inspect -m "$d") ;;
    *.json) d="$tmp/cfg"; rm -rf "$d"; mkdir -p "$d"; cp "$f" "$d/config.json"
            cmd=(inspect -m "$d") ;;
    *) continue ;;
  esac
  "$hr" "${cmd[@]}" > "$tmp/out.txt" 2> "$tmp/err.txt"
  st=$?
  base=$(basename "$f")
  if [ $st -ne 1 ]; then bad "$base: exit status $st"; cat "$tmp/err.txt"; continue; fi
  if ! grep -q -e "$base" -e "model.safetensors" -e "config.json" "$tmp/err.txt"; then
    bad "$base: message does not name the file: $(cat "$tmp/err.txt")"; continue
  fi
  ok
done
# a missing file
"$hr" inspect -m /nonexistent/model.gguf > /dev/null 2> "$tmp/err.txt"
[ $? -eq 1 ] && grep -q "/nonexistent/model.gguf" "$tmp/err.txt" && ok || bad "missing file"

# bench --repeat: the medians sit inside the reported ranges; --repeat 0 is refused
"$hr" bench -m tests/fixtures/models/llama-gqa --prompt 8 --gen 4 --repeat 3 --json \
  > "$tmp/bench.txt" 2>&1
line=$(tail -n 1 "$tmp/bench.txt")
inside() { # field range-field: lo <= value <= hi
  local v lo hi
  v=$(printf '%s' "$line" | sed -n "s/.*\"$1\": \([0-9.]*\).*/\1/p")
  lo=$(printf '%s' "$line" | sed -n "s/.*\"$2\": \[\([0-9.]*\), \([0-9.]*\)\].*/\1/p")
  hi=$(printf '%s' "$line" | sed -n "s/.*\"$2\": \[\([0-9.]*\), \([0-9.]*\)\].*/\2/p")
  [ -n "$v" ] && [ -n "$lo" ] && awk -v v="$v" -v lo="$lo" -v hi="$hi" \
    'BEGIN { exit !(lo <= v && v <= hi && lo > 0) }'
}
if printf '%s' "$line" | grep -q '"repeat": 3,' && inside prefill_tok_s prefill_tok_s_range \
   && inside decode_tok_s decode_tok_s_range; then ok
else bad "bench --repeat 3: $line"; fi
"$hr" bench -m tests/fixtures/models/llama-gqa --repeat 0 > /dev/null 2>&1
[ $? -eq 1 ] && ok || bad "bench --repeat 0 exit status"

# --version; an option of another command is refused, naming it
"$hr" --version > "$tmp/v.txt" 2>&1 && grep -q "^headroom [0-9]" "$tmp/v.txt" && ok || bad "--version"
"$hr" plan --mem-report > /dev/null 2> "$tmp/err.txt"
[ $? -eq 1 ] && grep -q -- "--mem-report does not apply" "$tmp/err.txt" && ok || bad "plan --mem-report"

# run: -n 0 generates nothing; a prompt of invalid UTF-8 (200 bytes of 0xff:
# U+FFFD each, three byte tokens) is tokenized whole, then refused for the
# context with the real count, or run when it fits
"$hr" run -p "ROMEO:" -n 0 > "$tmp/out.txt" 2> "$tmp/err.txt"
[ $? -eq 0 ] && grep -q "generation: 0 tokens" "$tmp/err.txt" && [ "$(tr -d '\n' < "$tmp/out.txt")" = "" ] \
  && ok || bad "run -n 0: $(cat "$tmp/err.txt")"
"$hr" run -p "$(printf '\xff%.0s' $(seq 200))" -n 2 > /dev/null 2> "$tmp/err.txt"
[ $? -eq 1 ] && grep -q "the prompt has 60[0-9] tokens but the context holds 512" "$tmp/err.txt" \
  && ok || bad "run, 200 invalid bytes: $(cat "$tmp/err.txt")"
"$hr" run -p "$(printf '\xff%.0s' $(seq 100))" -n 2 --temp 0 > /dev/null 2> "$tmp/err.txt"
[ $? -eq 0 ] && grep -q "prompt: 30[0-9] tokens" "$tmp/err.txt" && ok \
  || bad "run, 100 invalid bytes: $(cat "$tmp/err.txt")"

# convert: output = input (also through a link) is refused and the model is
# left as it was; a written file loads
"$hr" convert -o "$tmp/a.gguf" > /dev/null 2>&1 && ok || bad "convert the embedded model"
sum=$(cksum < "$tmp/a.gguf")
ln -sf "$(cd "$tmp" && pwd)/a.gguf" "$tmp/link.gguf"
for out in "$tmp/a.gguf" "$tmp/link.gguf"; do
  "$hr" convert -m "$tmp/a.gguf" -o "$out" --type q8_0 > /dev/null 2> "$tmp/err.txt"
  [ $? -eq 1 ] && grep -q "is the model being converted" "$tmp/err.txt" \
    && ! grep -q "convert: convert:" "$tmp/err.txt" && [ "$(cksum < "$tmp/a.gguf")" = "$sum" ] \
    && ok || bad "convert onto its input ($out): $(cat "$tmp/err.txt")"
done
"$hr" convert -m "$tmp/a.gguf" -o "$tmp/b.gguf" --type q8_0 > /dev/null 2>&1 \
  && "$hr" run -m "$tmp/b.gguf" -p "ROMEO:" -n 4 --temp 0 > /dev/null 2>&1 && ok || bad "convert q8_0, run"
ls "$tmp"/*.partial-* > /dev/null 2>&1 && bad "a partial file was left" || ok
rm -f "$tmp/a.gguf" "$tmp/b.gguf" "$tmp/link.gguf"

# quantize on load: each type runs; int8 and nf4 of the GGUF-only writer are
# refused by convert with a pointer to --weights; --kl-base compares
for t in q4_k nf4 int8; do
  "$hr" run --weights $t -p "ROMEO:" -n 4 --temp 0 > /dev/null 2>&1 && ok || bad "run --weights $t"
done
"$hr" run --weights q9_9 -p x -n 1 > /dev/null 2> "$tmp/err.txt"
[ $? -eq 1 ] && grep -q "unknown type 'q9_9'" "$tmp/err.txt" && ok || bad "--weights q9_9: $(cat "$tmp/err.txt")"
"$hr" convert -o "$tmp/c.gguf" --type nf4 > /dev/null 2> "$tmp/err.txt"
[ $? -eq 1 ] && grep -q "load it with --weights nf4" "$tmp/err.txt" && [ ! -e "$tmp/c.gguf" ] \
  && ok || bad "convert --type nf4: $(cat "$tmp/err.txt")"
head -c 4000 "$(dirname "$0")/../models/tiny-shakespeare/heldout.txt" > "$tmp/t.txt"
"$hr" perplexity --weights q4_0 --kl-base "$(dirname "$0")/../models/tiny-shakespeare" \
  -f "$tmp/t.txt" --ctx 128 > "$tmp/kl.txt" 2> /dev/null \
  && grep -q "^mean KL divergence: " "$tmp/kl.txt" && grep -q "^top-1 agreement: " "$tmp/kl.txt" \
  && ok || bad "perplexity --kl-base: $(cat "$tmp/kl.txt")"

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
