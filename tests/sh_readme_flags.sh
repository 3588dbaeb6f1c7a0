#!/usr/bin/env bash
# ctest-label: e2e
# The user documents and the CLI agree: every `headroom COMMAND ... --flag`
# shown in README.md, docs/design.md and docs/performance.md (in code blocks,
# and in inline code that starts with "headroom") names a command that has
# --help, and each of its flags appears in that command's --help. A flag
# shown without a command (`headroom --version`) must be in `headroom --help`
# or make `headroom FLAG` exit 0; a flag in inline code on its own
# (`--mmap`) must be in some command's --help.
#   tests/sh_readme_flags.sh PATH_TO_HEADROOM BUILD_DIR [DOCUMENT...]
# (the documents default to the three above, from the repository root)
set -u
hr=$1
tmp=$2/sh_readme_flags_tmp
shift 2
docs=("$@")
[ ${#docs[@]} -gt 0 ] || docs=(README.md docs/design.md docs/performance.md)
rm -rf "$tmp" # help texts are cached there for one run only
mkdir -p "$tmp"
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

# "file:line<TAB>command flag flag ..." for every headroom invocation shown:
# code-block lines and inline code spans; quoted strings and comments dropped,
# pipelines and command lists split.
extract() {
  awk -v file="$1" '
    function scan(text, at,    n, seg, i, toks, k, t, cmd, flags, found) {
      gsub(/"[^"]*"/, "", text)
      gsub(/\047[^\047]*\047/, "", text)
      sub(/(^|[ \t])#.*$/, "", text)
      n = split(text, seg, /\||;|&&|<|>/)
      for (i = 1; i <= n; i++) {
        k = split(seg[i], toks, /[ \t]+/)
        found = 0
        for (t = 1; t <= k; t++) {
          if (!found) {
            if (toks[t] == "headroom" || toks[t] ~ /\/headroom$/) {
              found = 1; cmd = ""; flags = ""
              if (t < k && toks[t + 1] ~ /^[a-z][a-z-]*$/) { cmd = toks[t + 1]; t++ }
            }
            continue
          }
          if (toks[t] ~ /^--?[A-Za-z][A-Za-z0-9-]*(=.*)?$/) {
            sub(/=.*/, "", toks[t])
            flags = flags " " toks[t]
          }
        }
        if (found)
          printf "%s:%d\t%s%s\n", file, at, (cmd == "" ? "-" : cmd), flags
      }
    }
    /^[ \t]*```/ { inblock = !inblock; next }
    inblock { scan($0, NR); next }
    {
      line = $0
      while (match(line, /`[^`]+`/)) {
        span = substr(line, RSTART + 1, RLENGTH - 2)
        if (span ~ /^headroom([ \t]|$)/)
          scan(span, NR)
        else if (span ~ /^--?[a-z][a-z0-9-]*([ \t=]|$)/) {
          sub(/[ \t=].*/, "", span)
          printf "%s:%d\t* %s\n", file, NR, span
        }
        line = substr(line, RSTART + RLENGTH)
      }
    }
  ' "$1"
}

: > "$tmp/uses.txt"
for d in "${docs[@]}"; do
  if [ ! -f "$d" ]; then bad "no document $d"; continue; fi
  extract "$d" >> "$tmp/uses.txt"
done

n_uses=$(wc -l < "$tmp/uses.txt")
n_flags=$(cut -f2 "$tmp/uses.txt" | tr ' ' '\n' | grep -c '^-')
# a parser that found nothing would pass everything: README shows every command
if [ ${#} -eq 0 ] && { [ "$n_uses" -lt 8 ] || [ "$n_flags" -lt 20 ]; }; then
  bad "found only $n_uses headroom commands and $n_flags flags in ${docs[*]}"
fi

help_of() { # command ("-" for none, "*" for all) -> its help in $tmp/help_<cmd>.txt
  local c=$1 f="$tmp/help_$1.txt"
  [ -f "$f" ] && { [ -s "$f.ok" ] && return 0 || return 1; }
  if [ "$c" = "*" ]; then # a flag in prose: any command's, or the top level's
    "$hr" --help > "$f" 2>&1
    for k in $(awk '/^commands:/ { on = 1; next } on && NF { print $1 }' "$f"); do
      "$hr" "$k" --help >> "$f" 2>&1
    done
  elif [ "$c" = "-" ]; then "$hr" --help > "$f" 2>&1; else "$hr" "$c" --help > "$f" 2>&1; fi
  if [ $? -eq 0 ]; then echo 1 > "$f.ok"; return 0; fi
  : > "$f.ok"
  return 1
}

while IFS=$'\t' read -r where rest; do
  read -r cmd flags <<< "$rest"
  if ! help_of "$cmd"; then
    bad "$where: 'headroom $cmd --help' failed: $(head -n 1 "$tmp/help_$cmd.txt")"
    continue
  fi
  ok
  name=headroom
  [ "$cmd" = "-" ] || name="headroom $cmd"
  [ "$cmd" = "*" ] && name="headroom (any command)"
  for f in $flags; do
    if grep -qE -- "(^|[^A-Za-z0-9-])$f([^A-Za-z0-9-]|\$)" "$tmp/help_$cmd.txt"; then
      ok
    elif [ "$cmd" != "${cmd#[-*]}" ] && "$hr" "$f" > /dev/null 2>&1; then
      ok
    else
      bad "$where: $name $f: not in '$name --help'"
    fi
  done
done < "$tmp/uses.txt"

echo "$n_uses commands, $n_flags flags shown; $pass passed, $fail failed"
[ $fail -eq 0 ]
