#!/usr/bin/env bash
# ctest-label: e2e
# `headroom chat` as scripts and people use it, with SmolLM2-135M-Instruct:
#   - stdin not a terminal: one message a line, one reply a line on stdout,
#     slash commands answered on stderr, exit 0 at the end of input;
#   - under tmux, as a person types: the prompt, a streamed reply, Ctrl-C
#     stopping a long reply without leaving, /stats, then Ctrl-D leaving.
#   tests/sh_chat.sh PATH_TO_HEADROOM BUILD_DIR
set -u
hr=$1
tmp=$2/sh_chat_tmp
rm -rf "$tmp"
mkdir -p "$tmp"
pass=0
fail=0
check() { # check NAME CONDITION...
  local name=$1
  shift
  if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $name"; fi
}
model=$(tools/fetch_smollm2.sh) || { echo "SKIP: SmolLM2 could not be fetched"; exit 77; }

# scripted: three lines in, two replies out (the middle line is a command)
printf 'Hi, my name is Ada.\n/stats\nWhat is my name?\n' |
  "$hr" chat -m "$model" --temp 0 -n 24 --ctx 1024 --device cpu > "$tmp/out" 2> "$tmp/err"
st=$?
check "scripted chat exits 0" [ $st -eq 0 ]
check "two replies, one a line" [ "$(wc -l < "$tmp/out")" -eq 2 ]
check "/stats answered" grep -q "prefilled" "$tmp/err"
check "the second reply is not empty" [ -n "$(sed -n 2p "$tmp/out")" ]
# a bad option and a model without a template: clear errors, exit 1
"$hr" chat --context-policy sometimes < /dev/null > /dev/null 2> "$tmp/err2"
check "bad policy refused" [ $? -eq 1 ]
check "bad policy named" grep -q "window, summarize or error" "$tmp/err2"
"$hr" chat < /dev/null > /dev/null 2> "$tmp/err3"
check "no template refused" grep -q "no chat template" "$tmp/err3"

# interactive, under tmux
if ! command -v tmux > /dev/null; then
  echo "tmux missing: the interactive part is skipped"
else
  sock=$tmp/tmux.sock
  t() { tmux -S "$sock" "$@"; }
  t new-session -d -s chat -x 120 -y 40 \
    "$hr chat -m $model --temp 0 --ctx 2048 --device cpu -n 400; echo EXITED \$? > $tmp/exit; sleep 30"
  wait_for() { # wait_for TEXT SECONDS
    for _ in $(seq 1 $(($2 * 10))); do
      t capture-pane -p -S - -t chat | grep -q "$1" && return 0
      sleep 0.1
    done
    return 1
  }
  check "prompt shown" wait_for '^>$' 60
  t send-keys -t chat 'Say hello in one word.' Enter
  sleep 0.3
  check "a reply, then the prompt again" wait_for '^>$' 60
  # a long reply, stopped by Ctrl-C once it is streaming
  t send-keys -t chat 'Write a very long poem about the sea, with twenty verses.' Enter
  sleep 1.5
  t send-keys -t chat C-c
  check "Ctrl-C stops the reply" wait_for 'stopped' 30
  check "still running after Ctrl-C" wait_for '^>$' 30
  t send-keys -t chat '/stats' Enter
  sleep 0.5
  check "/stats after Ctrl-C" wait_for "last reply" 10
  t send-keys -t chat C-d
  for _ in $(seq 1 100); do [ -f "$tmp/exit" ] && break; sleep 0.1; done
  check "Ctrl-D leaves with 0" grep -q "EXITED 0" "$tmp/exit"
  t capture-pane -p -S - -t chat > "$tmp/pane" 2> /dev/null
  t kill-server 2> /dev/null
fi
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
