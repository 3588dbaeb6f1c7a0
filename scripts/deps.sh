#!/usr/bin/env bash
# Installs the Debian packages headroom builds and tests with, when missing.
#   scripts/deps.sh --check   exit 0 when everything is present, 1 otherwise
#   scripts/deps.sh           apt-get install what is missing (needs root or sudo)
set -euo pipefail

# build: compiler, CMake, pkg-config; libraries: cJSON (JSON), PCRE2 (the
# pre-tokenizer regexes), xxHash (the KV prefix cache's block hashes),
# libedit (chat's line editing), libmicrohttpd (HTTP server); tmux (the chat
# test drives it as a person would); tests: python3 with
# Debian's sentencepiece (differential tokenizer test), clang + its runtime
# (libFuzzer targets); CI: python3-matplotlib (tools/plot_bench.py's charts).
PKGS=(build-essential cmake pkg-config libcjson-dev libpcre2-dev libxxhash-dev libedit-dev libmicrohttpd-dev tmux
      python3 python3-sentencepiece python3-matplotlib clang libclang-rt-14-dev)

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [[ "${1:-}" == "--check" ]]; then
  [[ ${#missing[@]} -eq 0 ]]
  exit
fi
if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi
echo "headroom: installing ${missing[*]}" >&2
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
