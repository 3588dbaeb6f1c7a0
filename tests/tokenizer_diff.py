#!/usr/bin/env python3
"""Reference ids for the tokenizer differential tests.

Generates a seeded set of test strings (bytes: mixed scripts, CJK, emoji
with ZWJ sequences and modifiers, combining marks, whitespace runs with tabs
and newlines, digits, punctuation, characters only byte fallback can encode,
special-token text, and invalid UTF-8) and writes them with the ids a
reference tokenizer gives for each. Invalid UTF-8 is decoded with
errors="replace" before encoding, which is what headroom does in C.

    /usr/bin/python3 tests/tokenizer_diff.py --model tokenizer.model --out cases.bin

uses SentencePiece (Debian's python3-sentencepiece) and exits 77 when it is
not installed. tools/make_tokenizer_fixtures.py imports gen_cases() and
write_cases() to build the committed BPE fixtures with Hugging Face
tokenizers.

File format (little-endian): "HRTK", u32 version, u32 n_cases,
u32 n_variants; per variant u8 name length + name; per case u32 length +
bytes; then per variant, per case: varint n_ids and either (version 1) the
ids as varints or (version 2, the committed fixtures, 5x smaller) a u32
FNV-1a hash of the ids as little-endian u32s.
"""
import argparse
import random
import struct
import sys

# Character pools, as (first, last) code point ranges.
SCRIPTS = {
    "latin": [(0x61, 0x7A), (0x41, 0x5A), (0xC0, 0xFF), (0x100, 0x17F)],
    "cyrillic": [(0x410, 0x44F)],
    "greek": [(0x391, 0x3A9), (0x3B1, 0x3C9)],
    "arabic": [(0x627, 0x64A)],
    "hebrew": [(0x5D0, 0x5EA)],
    "devanagari": [(0x905, 0x939), (0x93E, 0x94C)],
    "thai": [(0xE01, 0xE2E), (0xE30, 0xE3A)],
    "khmer": [(0x1780, 0x17B3), (0x17B6, 0x17D2)],
    "cjk": [(0x4E00, 0x9FA5)],
    "kana": [(0x3041, 0x3096), (0x30A1, 0x30FA)],
    "hangul": [(0xAC00, 0xD7A3)],
    "rare": [(0x10330, 0x1034A), (0x1D400, 0x1D433), (0xE000, 0xE0FF), (0x2C80, 0x2CB0),
             (0xA000, 0xA48C), (0x13A0, 0x13F4)],
}
EMOJI = ["\U0001F600", "\U0001F680", "\U0001F98A", "\u2705", "\u2764\ufe0f", "\U0001F44D\U0001F3FD",
         "\U0001F468\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466", "\U0001F3F3\ufe0f\u200d\U0001F308",
         "\U0001F1EB\U0001F1F7", "\U0001F9D1\u200d\U0001F4BB", "\U0001F636\u200d\U0001F32B\ufe0f",
         "\U0001F441\ufe0f\u200d\U0001F5E8\ufe0f", "\u263A", "\U0001F914"]
COMBINING = ["\u0301", "\u0300", "\u0308", "\u0323", "\u0327", "\u030A", "\u0303", "\u20DD",
             "\u0651", "\u093C", "\u0E31", "\u17B6"]
ODD_SPACE = ["\u00a0", "\u2009", "\u3000", "\u2028", "\u0085", "\u200b", "\ufeff", "\u180e",
             "\u202f", "\u1680"]
CONTROL = ["\x00", "\x01", "\x07", "\x1b", "\x7f", "\x0b", "\x0c", "\r"]
PUNCT = list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~") + ["\u2026", "\u00bf", "\u00ab", "\u00bb",
                                                     "\u201c", "\u201d", "\u3002", "\uff0c",
                                                     "\u2014", "\u00b7", "\u20ac"]
WORDS = ["the", "The", "Hello", "world", "tokenizer", "isn't", "we'll", "I'M", "they'RE",
         "you've", "she'd", "it's", "don't", "HTTP", "JSON", "café", "naïve", "über", "Straße",
         "function", "return", "int", "main", "x", "a", "I", "ok", "1st", "2nd", "3.14",
         "2024-01-01", "v1.2.3", "foo_bar", "camelCase", "snake_case", "ALLCAPS", "http://x.y/z"]
SPECIAL = ["<s>", "</s>", "<unk>", "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|end",
           "<s", "</s"]
INVALID = [b"\x80", b"\xbf", b"\xc0\xaf", b"\xc1\x81", b"\xe2\x82", b"\xe2", b"\xf0\x9f\x98",
           b"\xf0\x9f", b"\xed\xa0\x80", b"\xf5\x80\x80\x80", b"\xff", b"\xfe\xfe",
           b"\xe0\x80\x80", b"\xf4\x90\x80\x80", b"\xc3", b"\xc3\x28"]


def rand_char(rng, script):
    lo, hi = rng.choice(SCRIPTS[script])
    return chr(rng.randint(lo, hi))


def rand_word(rng, script):
    return "".join(rand_char(rng, script) for _ in range(rng.randint(1, 8)))


def rand_ws(rng):
    kind = rng.random()
    if kind < 0.5:
        return " " * rng.randint(1, 6)
    if kind < 0.7:
        return rng.choice(["\n", "\n\n", "\r\n", "\t", "\t\t", " \n", "\n ", " \t ", "\n\n\n"])
    if kind < 0.85:
        return "".join(rng.choice([" ", "\t", "\n"]) for _ in range(rng.randint(1, 8)))
    return rng.choice(ODD_SPACE)


def rand_piece(rng, with_special):
    r = rng.random()
    if r < 0.25:
        return rng.choice(WORDS)
    if r < 0.42:
        return rand_word(rng, rng.choice(list(SCRIPTS)))
    if r < 0.52:
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 12)))
        return digits if rng.random() < 0.7 else digits + "." + str(rng.randint(0, 999))
    if r < 0.60:
        return "".join(rng.choice(PUNCT) for _ in range(rng.randint(1, 4)))
    if r < 0.68:
        return rng.choice(EMOJI)
    if r < 0.75:
        base = rng.choice("aeiouAEIOUnc") if rng.random() < 0.7 else rand_char(rng, "latin")
        return base + "".join(rng.choice(COMBINING) for _ in range(rng.randint(1, 3)))
    if r < 0.79:
        return rng.choice(CONTROL)
    if r < 0.84 and with_special:
        return rng.choice(SPECIAL)
    return rand_word(rng, "rare")


def gen_cases(n, seed, with_special=True):
    """n test strings as bytes, deterministic for a seed."""
    rng = random.Random(seed)
    fixed = [b"", b" ", b"  ", b"\n", b"\t", b" \n ", b"Hello world", b" Hello world ",
             "caf\u00e9 cafe\u0301".encode(), b"\xff", b"\xe2\x82", b"a\xe2\x82\xacb"]
    out = list(fixed)
    while len(out) < n:
        parts = []
        for _ in range(rng.randint(1, 12)):
            parts.append(rand_piece(rng, with_special))
            if rng.random() < 0.55:
                parts.append(rand_ws(rng) if rng.random() < 0.4 else " ")
        if rng.random() < 0.2:
            parts.insert(0, rand_ws(rng))
        if rng.random() < 0.2:
            parts.append(rand_ws(rng))
        data = "".join(parts).encode("utf-8")
        if rng.random() < 0.12:
            pos = rng.randint(0, len(data))
            data = data[:pos] + rng.choice(INVALID) + data[pos:]
        if rng.random() < 0.04:  # cut inside a multi-byte character
            data = data[: rng.randint(0, len(data))]
        out.append(data)
    return out[:n]


def _varint(v):
    b = bytearray()
    while True:
        byte = v & 0x7F
        v >>= 7
        if v:
            b.append(byte | 0x80)
        else:
            b.append(byte)
            return bytes(b)


def ids_hash(ids):
    h = 0x811C9DC5
    for b in b"".join(struct.pack("<I", i) for i in ids):
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h


def write_cases(path, cases, variants, hashed=False):
    """variants: list of (name, list of id lists, one per case)."""
    with open(path, "wb") as f:
        f.write(b"HRTK" + struct.pack("<III", 2 if hashed else 1, len(cases), len(variants)))
        for name, _ in variants:
            nb = name.encode()
            f.write(struct.pack("<B", len(nb)) + nb)
        for c in cases:
            f.write(struct.pack("<I", len(c)) + c)
        for _, ids in variants:
            assert len(ids) == len(cases)
            for row in ids:
                f.write(_varint(len(row)))
                if hashed:
                    f.write(struct.pack("<I", ids_hash(row)))
                    continue
                for i in row:
                    f.write(_varint(i))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="SentencePiece tokenizer.model")
    ap.add_argument("--out", required=True)
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=20240601)
    args = ap.parse_args()
    try:
        import sentencepiece as spm
    except ImportError:
        print("SKIP: this python3 has no sentencepiece module (apt install python3-sentencepiece)")
        sys.exit(77)
    sp = spm.SentencePieceProcessor(model_file=args.model)
    cases = gen_cases(args.n, args.seed)
    ids = [sp.encode(c.decode("utf-8", "replace")) for c in cases]
    write_cases(args.out, cases, [("sentencepiece", ids)])
    print(f"wrote {len(cases)} cases to {args.out}")


if __name__ == "__main__":
    main()
