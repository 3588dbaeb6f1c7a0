#!/usr/bin/env bash
# ctest-label: e2e
# `headroom plan --svg`: the picture says what `plan --json` says. The SVG
# parses as XML (python3's xml.etree); every part's rect carries the bytes of
# the same part in `plan --json` for the same settings, and its height over
# its bar's height equals its bytes over the total (within the 0.001 px the
# file rounds to); the budget line carries the budget. Checked on a plan that
# does not fit (the suggested settings' bars, each a real plan: its rects
# against `plan --json` at that setting), on a cpu plan (mapped weights), and
# on sweeps of --ctx and --mem: one bar per value, data-fits as --json says.
#   tests/sh_plan_svg.sh PATH_TO_HEADROOM BUILD_DIR
set -u
hr=$1
tmp=$2/sh_plan_svg_tmp
mkdir -p "$tmp"
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

# check SVG JSONL: the bars of SVG, in order, against the plans of JSONL
# (one `plan --json` object a line, one per bar)
check() {
  python3 - "$1" "$2" <<'EOF'
import json, sys
import xml.etree.ElementTree as ET

NS = "{http://www.w3.org/2000/svg}"
# data-part -> the bytes in `plan --json` (runtime: overhead less graphs)
PARTS = {
    "weights_mapped": lambda j: j["weights_mapped_bytes"],
    "weights": lambda j: j["weights_bytes"],
    "kv": lambda j: j["kv_bytes"],
    "activations": lambda j: j["activation_bytes"],
    "workspace": lambda j: j["workspace_bytes"],
    "graphs": lambda j: j["graph_bytes"],
    "runtime": lambda j: j["overhead_bytes"] - j["graph_bytes"],
}
root = ET.parse(sys.argv[1]).getroot()
plans = [json.loads(line) for line in open(sys.argv[2]) if line.strip()]
bars = [g for g in root.iter(NS + "g") if g.get("class") == "bar"]
errors = []
if len(bars) != len(plans):
    errors.append(f"{len(bars)} bars for {len(plans)} plans")
scale = None  # px per byte, the same for every bar
for i, (g, plan) in enumerate(zip(bars, plans)):
    total, height = int(g.get("data-total")), float(g.get("data-height"))
    if total != plan["total_bytes"]:
        errors.append(f"bar {i}: data-total {total}, plan says {plan['total_bytes']}")
    if g.get("data-fits") != ("true" if plan["fits"] else "false"):
        errors.append(f"bar {i}: data-fits {g.get('data-fits')}, plan says {plan['fits']}")
    if int(g.get("data-budget")) != plan["budget_bytes"]:
        errors.append(f"bar {i}: data-budget {g.get('data-budget')}")
    scale = scale or height / total
    if abs(height - total * scale) > 0.002:
        errors.append(f"bar {i}: height {height} is not total x the first bar's scale")
    rects = {r.get("data-part"): r for r in g.iter(NS + "rect") if r.get("data-part")}
    for part, want in PARTS.items():
        b = want(plan)
        r = rects.get(part)
        if r is None:
            if b:
                errors.append(f"bar {i}: no rect for {part} ({b} bytes)")
            continue
        got, h = int(r.get("data-bytes")), float(r.get("height"))
        if got != b:
            errors.append(f"bar {i}: {part} data-bytes {got}, plan says {b}")
        if abs(h / height - b / total) > 0.002 / height:
            errors.append(f"bar {i}: {part} height {h} of {height}, bytes {b} of {total}")
    if abs(sum(float(r.get("height")) for r in rects.values()) - height) > 0.01:
        errors.append(f"bar {i}: the parts' heights do not add up to {height}")
budgets = {int(l.get("data-bytes")) for l in root.iter(NS + "line") if l.get("class") == "budget"}
if budgets != {p["budget_bytes"] for p in plans}:
    errors.append(f"budget lines {budgets}")
for e in errors:
    print(e)
sys.exit(1 if errors else 0)
EOF
}

# json NAME OPTIONS...: appends `plan --json OPTIONS` to $tmp/NAME.jsonl
json() {
  local name=$1
  shift
  "$hr" plan --json "$@" >> "$tmp/$name.jsonl"
  local rc=$?
  [ $rc -eq 0 ] || [ $rc -eq 2 ]
}

base=(--synthetic llama2-7b --device cuda --mem 24GiB)

# a plan that does not fit: asked, then --ctx and --parallel suggested
rm -f "$tmp"/*.jsonl "$tmp"/*.svg
"$hr" plan "${base[@]}" --ctx 8192 --parallel 4 --svg "$tmp/over.svg" > "$tmp/out.txt"
rc=$?
if [ $rc -eq 2 ]; then ok; else bad "plan that does not fit: exit $rc, not 2"; fi
json over "${base[@]}" --ctx 8192 --parallel 4
ctx=$(sed -n 's/.*"max_ctx": \([0-9]*\).*/\1/p' "$tmp/over.jsonl")
par=$(sed -n 's/.*"max_parallel": \([0-9]*\).*/\1/p' "$tmp/over.jsonl")
if [ "$ctx" -gt 0 ] && [ "$par" -gt 0 ]; then ok; else bad "no suggestions: ctx '$ctx' parallel '$par'"; fi
json over "${base[@]}" --ctx "$ctx" --parallel 4
json over "${base[@]}" --ctx 8192 --parallel "$par"
# and the smaller KV type it names (q8_0 on cuda too)
kvt=$(sed -n 's/.*"kv_dtype": "\([a-z0-9_]*\)".*/\1/p' "$tmp/over.jsonl" | head -1)
if [ -n "$kvt" ]; then json over "${base[@]}" --ctx 8192 --parallel 4 --kv-dtype "$kvt"; fi
if out=$(check "$tmp/over.svg" "$tmp/over.jsonl"); then ok; else bad "over.svg: $out"; fi
if [ ! -e "$tmp/over.svg.partial" ]; then ok; else bad "over.svg.partial left behind"; fi

# a cpu plan that fits: the weights as stored (mapped), one bar
"$hr" plan --synthetic smollm2-135m --device cpu --mem 2GiB --ctx 4096 --svg "$tmp/cpu.svg" > /dev/null
json cpu --synthetic smollm2-135m --device cpu --mem 2GiB --ctx 4096
if out=$(check "$tmp/cpu.svg" "$tmp/cpu.jsonl"); then ok; else bad "cpu.svg: $out"; fi

# sweeps: --ctx (where it stops fitting) and --mem (one budget line a bar);
# --json prints one object per value, the same as each value alone
"$hr" plan "${base[@]}" --ctx 2048,8192,32768 --svg "$tmp/ctx.svg" --json > "$tmp/ctx_sweep.jsonl"
for c in 2048 8192 32768; do json ctx "${base[@]}" --ctx "$c"; done
if cmp -s "$tmp/ctx.jsonl" "$tmp/ctx_sweep.jsonl"; then ok; else bad "--ctx sweep --json differs from single plans"; fi
if out=$(check "$tmp/ctx.svg" "$tmp/ctx.jsonl"); then ok; else bad "ctx.svg: $out"; fi
if grep -c 'data-fits="true"' "$tmp/ctx.svg" | grep -qx 2; then ok; else bad "ctx sweep: not 2 of 3 fitting"; fi
"$hr" plan --synthetic llama2-7b --device cuda --ctx 4096 --mem 8GiB,12GiB,24GiB --svg "$tmp/mem.svg" > /dev/null
for m in 8GiB 12GiB 24GiB; do json mem --synthetic llama2-7b --device cuda --ctx 4096 --mem "$m"; done
if out=$(check "$tmp/mem.svg" "$tmp/mem.jsonl"); then ok; else bad "mem.svg: $out"; fi

# the checker catches a wrong height and a wrong byte count
sed 's/data-part="kv" data-bytes="\([0-9]*\)"/data-part="kv" data-bytes="1\1"/' "$tmp/cpu.svg" > "$tmp/bad.svg"
if ! check "$tmp/bad.svg" "$tmp/cpu.jsonl" > /dev/null; then ok; else bad "checker missed wrong bytes"; fi
python3 - "$tmp/cpu.svg" "$tmp/bad2.svg" <<'EOF'
import re, sys
s = open(sys.argv[1]).read()
s = re.sub(r'height="([0-9.]+)" fill="([^"]*)" data-part="kv"',
           lambda m: f'height="{float(m.group(1)) * 1.05:.3f}" fill="{m.group(2)}" data-part="kv"', s)
open(sys.argv[2], "w").write(s)
EOF
if ! check "$tmp/bad2.svg" "$tmp/cpu.jsonl" > /dev/null; then ok; else bad "checker missed a wrong height"; fi

# bad lists: exit 1 with a message
for args in "--ctx 2048,,4096" "--ctx 2048,1" "--parallel 1,x" "--ctx 1,2 --parallel 1,2"; do
  # shellcheck disable=SC2086
  "$hr" plan --synthetic llama2-7b --mem 8GiB $args > /dev/null 2> "$tmp/err.txt"
  rc=$?
  if [ $rc -eq 1 ] && [ -s "$tmp/err.txt" ]; then ok; else bad "plan $args: exit $rc"; fi
done
# an unwritable path: exit 1, no file
"$hr" plan --synthetic llama2-7b --mem 8GiB --svg "$tmp/no/such/dir.svg" > /dev/null 2> "$tmp/err.txt"
rc=$?
if [ $rc -eq 1 ] && grep -q "no/such/dir.svg" "$tmp/err.txt"; then ok; else bad "unwritable --svg: exit $rc"; fi

echo "sh_plan_svg: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
