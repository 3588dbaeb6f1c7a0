#!/usr/bin/env python3
"""Unicode Script table for the UnicodeScripts pre-tokenizer, and its test
fixtures.

    tools/gen_unicode_scripts.py [--ucd DIR]      writes the table
    tools/gen_unicode_scripts.py --check          compares it with HF tokenizers
    tools/gen_unicode_scripts.py --fixtures       writes tests/data/pretok/
    tools/gen_unicode_scripts.py --show N         prints fixture case N

Table: src/tokenizer/unicode_scripts_data.c (and the counts in
unicode_scripts.h), from Scripts.txt and DerivedAge.txt of a Unicode
Character Database folder (default /usr/share/unicode, Debian's
unicode-data package, Unicode 15.0.0 in Debian 13). Hugging Face tokenizers
carries a Script table of Unicode 9.0 (the script list of its scripts.rs
ends with Unicode 9's Adlam, Bhaiksuki, Marchen, Newa, Osage and Tangut) and
treats every code point its table lacks like a space. To reproduce that from
a newer database, code points whose Age is above --max-age (default 9.0)
are left Unknown; --check then confirms, over every code point, that the
result splits text exactly as Hugging Face does.

Layout: uni_script_runs[i] = (first code point << 8) | script id; a run
lasts until the next one starts, the gaps being runs of Unknown (id 0). Ids
0..5 are fixed (Unknown, Common, Inherited, Han, Hiragana, Katakana: the
ones the splitter names); the other scripts follow in name order.

Fixtures (tests/data/pretok/, read by tests/test_pretok_extra.c):
  *.template.json   tokenizer.json variants: {"base": "llama2" | "gpt2",
                    "normalizer": ..., "pre_tokenizer": ...}; the test puts
                    them over tests/fixtures/tokenizers/llama2/tokenizer.json
                    or GPT-2's vocabulary from ggml-vocab-gpt-2.gguf
  cases.bin         little-endian: "HRPT", u32 version 1, u32 n_cases,
                    u32 n_variants; per variant u8 name length + name; per
                    case u32 length + bytes; then per variant a u8 "has
                    pieces" and per case: if it has pieces, u8 1 + varint
                    count + u32 hash of the byte offsets (start, end, ...)
                    that pre_tokenize_str gives, or u8 0 where the case is
                    not valid UTF-8; then varint n_ids + u32 hash of the ids
                    encode gives (add_special_tokens). Hashes are
                    tests/tokenizer_diff.py's FNV-1a over u32s.
"""
import argparse
import json
import os
import random
import re
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))

FIXED_IDS = ["Unknown", "Common", "Inherited", "Han", "Hiragana", "Katakana"]
DATA_C = os.path.join(ROOT, "src/tokenizer/unicode_scripts_data.c")
HEADER = os.path.join(ROOT, "src/tokenizer/unicode_scripts.h")
FIXTURES = os.path.join(ROOT, "tests/data/pretok")
LLAMA2_JSON = os.path.join(ROOT, "tests/fixtures/tokenizers/llama2/tokenizer.json")


# ---------------------------------------------------------------- table

def read_ucd_ranges(path):
    """Yields (first, last, value, version) from a UCD property file."""
    version = None
    with open(path, encoding="utf-8") as f:
        for line in f:
            if version is None:
                m = re.match(r"#\s*\S+-(\d+\.\d+\.\d+)\.txt", line)
                if m:
                    version = m.group(1)
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            cps, value = [x.strip() for x in line.split(";")]
            lo, _, hi = cps.partition("..")
            yield int(lo, 16), int(hi or lo, 16), value, version


# Script values that Unicode 9.0 had and later versions changed (Armenian
# full stop and Arabic letter mark were Common; two Devanagari stress signs
# became Inherited). --check found these as the only differences between
# the 15.0 values restricted to 9.0's code points and Hugging Face's table.
VALUES_IN_9_0 = {0x0589: "Common", 0x061C: "Common", 0x0953: "Devanagari",
                 0x0954: "Devanagari"}


def script_map(ucd, max_age):
    """cp -> script name for every code point assigned by max_age; the
    database version."""
    age = {}
    for lo, hi, value, _ in read_ucd_ranges(os.path.join(ucd, "DerivedAge.txt")):
        for cp in range(lo, hi + 1):
            age[cp] = tuple(int(x) for x in value.split("."))
    scripts, version = {}, None
    for lo, hi, value, version in read_ucd_ranges(os.path.join(ucd, "Scripts.txt")):
        for cp in range(lo, hi + 1):
            if age.get(cp, (99, 99)) <= max_age:
                scripts[cp] = value
    if max_age == (9, 0):
        scripts.update(VALUES_IN_9_0)
    return scripts, version


def script_ids(scripts):
    names = FIXED_IDS + sorted(set(scripts.values()) - set(FIXED_IDS))
    assert len(names) <= 256, "script ids must fit in 8 bits"
    return {n: i for i, n in enumerate(names)}, names


def runs_of(scripts, ids):
    runs = []  # (first, id)
    for cp in range(0x110000):
        sid = ids[scripts.get(cp, "Unknown")]
        if not runs or runs[-1][1] != sid:
            runs.append((cp, sid))
    return runs


def write_table(ucd, max_age):
    scripts, version = script_map(ucd, max_age)
    ids, names = script_ids(scripts)
    runs = runs_of(scripts, ids)
    age = "%d.%d" % max_age

    def rows(items, per):
        return "\n".join("   " + "".join(" " + x + "," for x in items[i:i + per])
                         for i in range(0, len(items), per))

    with open(DATA_C, "w") as f:
        f.write(f"""/*
 * unicode_scripts_data.c — the Unicode Script property of every code point
 * assigned by Unicode {age} (the table Hugging Face tokenizers' UnicodeScripts
 * uses), generated by tools/gen_unicode_scripts.py from the Unicode
 * {version} Scripts.txt and DerivedAge.txt (do not edit).
 *
 *   uni_script_runs:  (first code point << 8) | script id, sorted; a run
 *                     lasts until the next starts; Unknown (0) fills gaps
 *   uni_script_names: the Scripts.txt name of each id
 */
#include "tokenizer/unicode_scripts.h"

const uint32_t uni_script_runs[UNI_N_SCRIPT_RUNS] = {{
{rows(["0x%X" % (cp << 8 | sid) for cp, sid in runs], 7)}
}};

const char *const uni_script_names[UNI_N_SCRIPTS] = {{
{rows(['"%s"' % n for n in names], 5)}
}};
""")
    with open(HEADER) as f:
        h = f.read()
    for name, n in (("UNI_N_SCRIPTS", len(names)), ("UNI_N_SCRIPT_RUNS", len(runs))):
        h = re.sub(r"#define %s \d+" % name, "#define %s %d" % (name, n), h)
    h = re.sub(r"Unicode \d+\.\d+ \(", "Unicode %s (" % age, h)
    with open(HEADER, "w") as f:
        f.write(h)
    print("wrote %s: %d scripts, %d runs (Unicode %s database, assigned by %s)"
          % (DATA_C, len(names), len(runs), version, age))


def read_table():
    """The committed table as cp -> script name (Unknown omitted)."""
    with open(DATA_C) as f:
        text = f.read()
    body = text.split("uni_script_runs", 1)[1].split("};", 1)[0]
    runs = [int(x, 16) for x in re.findall(r"0x[0-9A-F]+", body)]
    names = re.findall(r'"([A-Za-z_]+)"', text.split("uni_script_names", 1)[1])
    table = {}
    for i, r in enumerate(runs):
        end = (runs[i + 1] >> 8) if i + 1 < len(runs) else 0x110000
        if r & 0xFF:
            for cp in range(r >> 8, end):
                table[cp] = names[r & 0xFF]
    return table


# ---------------------------------------------------------------- HF's rules

def fixed_script(table, cp):
    """Hugging Face's UnicodeScripts view of a code point; None: "Any"
    (joins whatever surrounds it)."""
    if cp == 0x30FC:  # KATAKANA-HIRAGANA PROLONGED SOUND MARK (Common)
        return "Han"
    if cp == 0x20:
        return None
    s = table.get(cp)
    if s in ("Hiragana", "Katakana"):
        return "Han"
    return s


def split_scripts(table, text):
    """Pieces as (start, end) in characters: a piece starts at every
    character that is not Any and differs from the last non-Any script;
    what precedes the first such character is dropped."""
    cuts, last = [], None
    for i, ch in enumerate(text):
        s = fixed_script(table, ord(ch))
        if s is not None and s != last:
            cuts.append(i)
        if s is not None:
            last = s
    cuts.append(len(text))
    return list(zip(cuts, cuts[1:]))


def check():
    """Splits long strings with HF and with the table and lists every code
    point where the two put a piece boundary differently."""
    from tokenizers import pre_tokenizers
    table = read_table()
    pre = pre_tokenizers.UnicodeScripts()
    cps = [cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF]
    orders = [("code point order", cps)]
    for seed in (1, 2, 3):
        shuffled = list(cps)
        random.Random(seed).shuffle(shuffled)
        orders.append(("shuffle %d" % seed, shuffled))
    # every code point between two of an anchor: X joins the anchors exactly
    # when it has the anchor's script (or is Any), which pins down the
    # Common / Inherited / ... membership that neighbours in code point
    # order cannot (Common next to Common, say)
    for anchor in (0x21, 0x301, 0x61, 0x4E00, 0x410, 0x3B1, 0x627, 0x905, 0xE01, 0xAC00):
        orders.append(("U+%04X X U+%04X" % (anchor, anchor),
                       [c for cp in cps for c in (anchor, cp)] + [anchor]))
    bad = set()
    for what, seq in orders:
        n_bad = len(bad)
        for i in range(0, len(seq), 4096):
            text = "".join(map(chr, seq[i:i + 4096]))
            got = {a for _, (a, _) in pre.pre_tokenize_str(text)}
            want = {a for a, _ in split_scripts(table, text)}
            for pos in got ^ want:
                bad.add(ord(text[pos]))
        print("%s: %d code points checked, %d new differences" % (what, len(seq), len(bad) - n_bad))
    if bad:
        print("differ:", " ".join("U+%04X(%s)" % (cp, table.get(cp)) for cp in sorted(bad)))
        sys.exit(1)
    print("table agrees with Hugging Face tokenizers", __import__("tokenizers").__version__)


# ---------------------------------------------------------------- fixtures

N_GENERAL = 1500
N_SCRIPTS = 1000
SEED = 11

SCRIPT_POOLS = {
    "latin": [(0x61, 0x7A), (0x41, 0x5A), (0xC0, 0xFF)],
    "cyrillic": [(0x410, 0x44F)],
    "greek": [(0x391, 0x3A9), (0x3B1, 0x3C9)],
    "han": [(0x4E00, 0x9FA5)],
    "hiragana": [(0x3041, 0x3096)],
    "katakana": [(0x30A1, 0x30FA), (0x30FC, 0x30FE), (0x31F0, 0x31FF)],
    "hangul": [(0xAC00, 0xD7A3), (0x1100, 0x1112)],
    "arabic": [(0x627, 0x64A), (0x660, 0x669)],
    "hebrew": [(0x5D0, 0x5EA)],
    "devanagari": [(0x905, 0x939), (0x93E, 0x94D)],
    "thai": [(0xE01, 0xE2E), (0xE30, 0xE3A), (0xE50, 0xE59)],
    "digits": [(0x30, 0x39), (0xFF10, 0xFF19)],
    "punct": [(0x21, 0x2F), (0x3A, 0x40), (0x5B, 0x60), (0x7B, 0x7E), (0x3001, 0x3003),
              (0x2010, 0x2027), (0xFF01, 0xFF0F)],
    "marks": [(0x300, 0x36F), (0x1AB0, 0x1ABE), (0x20D0, 0x20F0), (0x3099, 0x309A)],
    "emoji": [(0x1F300, 0x1F64F), (0x1F680, 0x1F6C5), (0x1F900, 0x1F9FF), (0x2600, 0x26FF)],
    "space": [(0x20, 0x20), (0x20, 0x20), (0x9, 0xD), (0xA0, 0xA0), (0x3000, 0x3000),
              (0x2000, 0x200B)],
    # unassigned in Unicode 9 (Any for Hugging Face): letters and emoji of
    # Unicode 10..14 (not later: PCRE2 10.42, which runs the Whitespace
    # pre-tokenizer's regex, knows Unicode 14 and Rust's regex crate, which
    # Hugging Face runs it with, a later one), private use, unassigned
    "late": [(0x0860, 0x086A), (0x1F970, 0x1F97A), (0x10F30, 0x10F45), (0x11800, 0x1182B),
             (0x1B170, 0x1B2FB), (0x0378, 0x0379), (0x10FFF0, 0x10FFFD)],
    "rare": [(0x10330, 0x1034A), (0x13A0, 0x13F4), (0x1780, 0x17D2), (0xA000, 0xA48C),
             (0x16A0, 0x16F0), (0x10900, 0x1091B)],
}


def gen_script_cases(n, seed):
    """Strings that switch script often, mostly without spaces between."""
    rng = random.Random(seed)
    pools = list(SCRIPT_POOLS)
    fixed = ["", " ", "   ", "  abc", "abc  ", "a b", "a 1", "\U0001F970 abc", " \U0001F970",
             "どこで生れ。Yes", "Apples are りんご 林檎", "カタカナーひらがな漢字", "e\u0301x",
             "\u0301abc", "abc\U0001F970def", "ー", "ーa", " ー ", "a\tb", "1.5", "\u0378"]
    out = list(fixed)
    while len(out) < n:
        parts = []
        for _ in range(rng.randint(1, 10)):
            lo, hi = rng.choice(SCRIPT_POOLS[rng.choice(pools)])
            parts.append("".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 6))))
            if rng.random() < 0.25:
                parts.append(" " * rng.randint(1, 3))
        out.append("".join(parts))
    return [s.encode("utf-8") for s in out[:n]]


def all_cases():
    import tokenizer_diff
    return tokenizer_diff.gen_cases(N_GENERAL, SEED) + gen_script_cases(N_SCRIPTS, SEED + 1)


def variants():
    """(name, base, normalizer, pre-tokenizer, pieces?)."""
    from tokenizers import pre_tokenizers as P
    return [
        ("scripts", "llama2", None, P.UnicodeScripts(), True),
        ("fixed5", "llama2", None, P.FixedLength(), True),
        ("fixed3", "llama2", None, P.FixedLength(length=3), True),
        ("whitespace", "llama2", None, P.Whitespace(), True),
        ("ws_scripts", "llama2", None, P.Sequence([P.Whitespace(), P.UnicodeScripts()]), True),
        ("scripts_bytelevel", "gpt2", None,
         P.Sequence([P.UnicodeScripts(), P.ByteLevel(add_prefix_space=False, use_regex=True)]),
         False),
        ("bytelevel_scripts", "gpt2", None,
         P.Sequence([P.ByteLevel(add_prefix_space=True, use_regex=True), P.UnicodeScripts()]),
         False),
        ("fixed4_bytelevel", "gpt2", None,
         P.Sequence([P.FixedLength(length=4), P.ByteLevel(add_prefix_space=False,
                                                            use_regex=False)]), False),
        ("wsplit_fixed2_scripts", "llama2", None,
         P.Sequence([P.WhitespaceSplit(), P.FixedLength(length=2), P.UnicodeScripts()]), True),
    ]


def gpt2_tokenizer():
    from make_tokenizer_fixtures import gpt2_vocab  # tools/, beside this script
    from tokenizers import AddedToken, Tokenizer, decoders, models
    tokens, merges = gpt2_vocab()
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    tok.add_special_tokens([AddedToken("<|endoftext|>", special=True, normalized=False)])
    tok.decoder = decoders.ByteLevel()
    return tok


def tokenizer_for(base, norm, pre):
    from tokenizers import Tokenizer
    if base == "llama2":
        with open(LLAMA2_JSON, encoding="utf-8") as f:
            tok = Tokenizer.from_str(f.read())
    else:
        tok = gpt2_tokenizer()
    tok.normalizer = norm
    tok.pre_tokenizer = pre
    return tok


def _varint(v):
    b = bytearray()
    while True:
        byte = v & 0x7F
        v >>= 7
        if not v:
            b.append(byte)
            return bytes(b)
        b.append(byte | 0x80)


def byte_ranges(text, ranges):
    """Character ranges -> byte ranges of text's UTF-8."""
    offs = [0]
    for ch in text:
        offs.append(offs[-1] + len(ch.encode("utf-8")))
    return [(offs[a], offs[b]) for a, b in ranges]


def is_valid(b):
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def fixtures():
    import tokenizer_diff
    cases = all_cases()
    os.makedirs(FIXTURES, exist_ok=True)
    out = bytearray(b"HRPT" + struct.pack("<I", 1) + struct.pack("<I", len(cases)))
    vs = variants()
    out += struct.pack("<I", len(vs))
    for name, _, _, _, _ in vs:
        out += struct.pack("<B", len(name)) + name.encode()
    for c in cases:
        out += struct.pack("<I", len(c)) + c
    for name, base, norm, pre, pieces in vs:
        tok = tokenizer_for(base, norm, pre)
        data = json.loads(tok.to_str())
        with open(os.path.join(FIXTURES, name + ".template.json"), "w", encoding="utf-8") as f:
            json.dump({"base": base, "normalizer": data["normalizer"],
                       "pre_tokenizer": data["pre_tokenizer"]}, f, ensure_ascii=False, indent=1)
            f.write("\n")
        # pieces: a flag byte (0: none, the case is not valid UTF-8), the
        # count and the hash of the byte offsets (start, end, start, ...)
        out += struct.pack("<B", 1 if pieces else 0)
        for c in cases:
            if pieces and not is_valid(c):
                out += b"\x00"
            elif pieces:
                text = c.decode("utf-8")
                br = byte_ranges(text, [o for _, o in pre.pre_tokenize_str(text)])
                out += b"\x01" + _varint(len(br))
                out += struct.pack("<I", tokenizer_diff.ids_hash([x for r in br for x in r]))
            ids = tok.encode(c.decode("utf-8", "replace"), add_special_tokens=True).ids
            out += _varint(len(ids)) + struct.pack("<I", tokenizer_diff.ids_hash(ids))
    with open(os.path.join(FIXTURES, "cases.bin"), "wb") as f:
        f.write(out)
    print("wrote %s: %d cases, %d variants, %d bytes" % (FIXTURES, len(cases), len(vs), len(out)))


def show(n):
    case = all_cases()[n]
    print("case", n, repr(case))
    text = case.decode("utf-8", "replace")
    for name, base, norm, pre, _ in variants():
        print(name, [p for p, _ in pre.pre_tokenize_str(text)])
        print("   ", tokenizer_for(base, norm, pre).encode(text, add_special_tokens=True).ids)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ucd", default="/usr/share/unicode",
                    help="folder with Scripts.txt and DerivedAge.txt")
    ap.add_argument("--max-age", default="9.0", help="last Unicode version whose code points count")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--fixtures", action="store_true")
    ap.add_argument("--show", type=int)
    a = ap.parse_args()
    if a.check:
        check()
    elif a.fixtures:
        fixtures()
    elif a.show is not None:
        show(a.show)
    else:
        write_table(a.ucd, tuple(int(x) for x in a.max_age.split(".")))


if __name__ == "__main__":
    main()
