#!/usr/bin/env python3
"""make_quant_fixtures.py - reference data for tests/test_quant.c.

Writes tests/fixtures/quant/<type>.bin, one file per stored type, each with
two sections made from seeded random data:

  D (dequantize): raw blocks (random bytes whose f16/f32 scale fields are set
    to finite values: zero, f16-subnormal, large, random) and their dequantized
    floats from the Python gguf package (gguf.quants), the reference that
    llama.cpp's own converter uses. Q8_K has no gguf-py dequantizer; its floats
    are d * q computed in float32 here (one multiply, exact).
  Q (quantize): source floats (gaussian, heavy-tailed, odd per-block scales,
    all-zero, constant, single-value, max-magnitude, f16-underflow and
    subnormal blocks) and the reference quantized bytes: gguf-py's for BF16,
    F16 (numpy) and the legacy types; ggml's own quantize_row_*_ref for the
    K-quants, which gguf-py cannot quantize.
  H (hashed bulk): n_gen blocks from gen_blocks() below, an integer-only
    generator that test_quant.c reimplements exactly, quantized by the same
    reference; only an FNV-1a 64 hash per gen_chunk blocks is stored. Rare
    search paths (a refit winning by one ulp, the last candidate scale) show
    up in well under 1% of blocks, so bit-exactness needs thousands of blocks;
    storing their bytes would not fit the ~300 KB fixture budget.

ggml is used as a black-box oracle: the tool compiles ggml-quants.c from a
llama.cpp source tree into a temporary shared library and calls it through
ctypes (no ggml code enters headroom). Get a tree from PyPI with
    pip download --no-deps --no-binary :all: llama-cpp-python
    tar xzf llama_cpp_python-*.tar.gz
and pass --ggml-src llama_cpp_python-*/vendor/llama.cpp/ggml. It is compiled
with -ffp-contract=off, i.e. the arithmetic of an x86-64 llama.cpp build
(its ggml-base is built without FMA). With ggml present the tool also checks
that gguf-py and ggml agree on every dequantization and legacy quantization.
--no-ggml writes the files without the K-quant Q sections (the C test then
reports them as skipped).

File layout (little-endian):
  char magic[4] = "HRQF"; u32 version = 1; u32 ggml_type; u32 block_elems;
  u32 block_bytes; u32 n_dq (blocks in D); u32 n_q (blocks in Q);
  u32 q_source (0 none, 1 gguf-py/numpy, 2 ggml; for Q and H);
  u32 n_gen (blocks in H); u32 gen_seed; u32 gen_chunk (blocks per hash)
  D: u8 raw[n_dq * block_bytes]; f32 deq[n_dq * block_elems]
  Q: f32 src[n_q * block_elems]; u8 ref[n_q * block_bytes]
  H: u64 hash[n_gen / gen_chunk]

Usage: python3 tools/make_quant_fixtures.py --ggml-src DIR [--out DIR]
"""

import argparse
import ctypes
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
from gguf.constants import GGMLQuantizationType as GT
import gguf.quants as gq

MAGIC = b"HRQF"
VERSION = 1
SRC_NONE, SRC_GGUF, SRC_GGML = 0, 1, 2

# name, ggml type, block elems, block bytes, (offset, kind) of each scale field,
# who quantizes (gguf-py or ggml), ggml's function suffix
TYPES = [
    ("f16", GT.F16, 1, 2, [], SRC_GGUF, None),
    ("bf16", GT.BF16, 1, 2, [], SRC_GGUF, None),
    ("q8_0", GT.Q8_0, 32, 34, [(0, "f16")], SRC_GGUF, "q8_0"),
    ("q4_0", GT.Q4_0, 32, 18, [(0, "f16")], SRC_GGUF, "q4_0"),
    ("q4_1", GT.Q4_1, 32, 20, [(0, "f16"), (2, "f16")], SRC_GGUF, "q4_1"),
    ("q5_0", GT.Q5_0, 32, 22, [(0, "f16")], SRC_GGUF, "q5_0"),
    ("q5_1", GT.Q5_1, 32, 24, [(0, "f16"), (2, "f16")], SRC_GGUF, "q5_1"),
    ("q2_k", GT.Q2_K, 256, 84, [(80, "f16"), (82, "f16")], SRC_GGML, "q2_K"),
    ("q3_k", GT.Q3_K, 256, 110, [(108, "f16")], SRC_GGML, "q3_K"),
    ("q4_k", GT.Q4_K, 256, 144, [(0, "f16"), (2, "f16")], SRC_GGML, "q4_K"),
    ("q5_k", GT.Q5_K, 256, 176, [(0, "f16"), (2, "f16")], SRC_GGML, "q5_K"),
    ("q6_k", GT.Q6_K, 256, 210, [(208, "f16")], SRC_GGML, "q6_K"),
    ("q8_k", GT.Q8_K, 256, 292, [(0, "f32")], SRC_GGML, "q8_K"),
]

N_DQ = {1: 1024, 32: 40, 256: 8}
N_GEN = {32: 16384, 256: 4096}  # blocks in H
GEN_CHUNK = 64


# ---------------------------------------------------------------- ggml oracle

STUB_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <stddef.h>
void ggml_abort(const char *file, int line, const char *fmt, ...) {
    fprintf(stderr, "ggml_abort at %s:%d (%s)\n", file, line, fmt);
    abort();
}
size_t ggml_row_size(int type, int64_t ne) { (void)type; (void)ne; abort(); }
size_t ggml_type_size(int type) { (void)type; abort(); }
const char *ggml_type_name(int type) { (void)type; return "?"; }
"""


class Ggml:
    def __init__(self, src_dir):
        quants = os.path.join(src_dir, "src", "ggml-quants.c")
        if not os.path.exists(quants):
            sys.exit(f"{quants}: not found (--ggml-src must be a ggml dir of a llama.cpp tree)")
        self.tmp = tempfile.TemporaryDirectory()
        stub = os.path.join(self.tmp.name, "stub.c")
        lib = os.path.join(self.tmp.name, "libggmlquants.so")
        with open(stub, "w") as f:
            f.write(STUB_C)
        cmd = ["cc", "-O2", "-std=gnu11", "-ffp-contract=off", "-fPIC", "-shared",
               "-I", os.path.join(src_dir, "include"), "-I", os.path.join(src_dir, "src"),
               quants, stub, "-o", lib, "-lm"]
        subprocess.run(cmd, check=True)
        self.lib = ctypes.CDLL(lib)

    def quantize(self, suffix, src, block_bytes, block_elems):
        fn = getattr(self.lib, f"quantize_row_{suffix}_ref")
        n = src.size
        out = np.zeros(n // block_elems * block_bytes, dtype=np.uint8)
        src = np.ascontiguousarray(src, dtype=np.float32)
        fn(src.ctypes.data_as(ctypes.c_void_p), out.ctypes.data_as(ctypes.c_void_p),
           ctypes.c_int64(n))
        return out

    def dequantize(self, suffix, raw, block_bytes, block_elems):
        fn = getattr(self.lib, f"dequantize_row_{suffix}")
        n = raw.size // block_bytes * block_elems
        out = np.zeros(n, dtype=np.float32)
        raw = np.ascontiguousarray(raw)
        fn(raw.ctypes.data_as(ctypes.c_void_p), out.ctypes.data_as(ctypes.c_void_p),
           ctypes.c_int64(n))
        return out


# ---------------------------------------------------------------- inputs

def f16_bits(v):
    return int(np.array([v], dtype=np.float32).astype(np.float16).view(np.uint16)[0])


def f32_bits(v):
    return int(np.array([v], dtype=np.float32).view(np.uint32)[0])


def random_blocks(rng, block_bytes, n, fields):
    """Random bytes; scale fields made finite: block 0 zero, block 1 an f16
    subnormal, block 2 large, block 3 negative, the rest random."""
    raw = rng.integers(0, 256, size=(n, block_bytes), dtype=np.uint8)
    for b in range(n):
        for k, (off, kind) in enumerate(fields):
            if b == 0:
                v = 0.0
            elif b == 1:
                v = float(rng.integers(1, 1024)) * 2.0 ** -24  # f16 subnormal
            elif b == 2:
                v = 3.0e4 / (k + 1)
            elif b == 3:
                v = -0.37
            else:
                v = float(rng.standard_normal() * 10.0 ** rng.uniform(-4, 1))
            if kind == "f16":
                raw[b, off:off + 2] = np.frombuffer(struct.pack("<H", f16_bits(v)), np.uint8)
            else:
                raw[b, off:off + 4] = np.frombuffer(struct.pack("<I", f32_bits(v)), np.uint8)
    return raw.reshape(-1)


def legacy_sources(rng):
    """Blocks of 32 covering the quantizers' edge cases."""
    n = 32
    g = rng.standard_normal
    blocks = [
        np.zeros(n),                                   # all zero
        g(n), g(n) * 1e-3, g(n) * 1e3,                 # odd scales
        rng.uniform(0, 1, n), -rng.uniform(0, 1, n),   # one-signed (min > 0, max < 0)
        np.full(n, 0.7), np.full(n, -3.0),             # constant: Q4_1 d = 0
        np.where(np.arange(n) == 7, 5.0, 0.0),         # single value
        np.where(np.arange(n) == 20, -5.0, 0.0),
        np.where(np.arange(n) == 3, 4.0, np.where(np.arange(n) == 9, -4.0, g(n))),  # |max| tie
        np.where(np.arange(n) == 3, -4.0, np.where(np.arange(n) == 9, 4.0, g(n))),
        g(n) / 4 * 65000 / 4,                          # large
        np.concatenate([[1e5], g(n - 1) * 1e4]),       # amax 1e5: f16 scales still finite
        np.concatenate([[3e7], g(n - 1)]),             # Q8_0 scale overflows f16 (bytes only)
        g(n) * 1e-6,                                   # scale underflows to f16 subnormal / 0
        g(n) * 1e-40,                                  # subnormal floats
        np.concatenate([[127.0], np.arange(n - 1) - 15.5]),  # Q8_0 ties: x/d = k + 0.5
        np.concatenate([[-8.0], np.arange(n - 1) % 16 - 8.0]),  # Q4_0 exact codes
        np.concatenate([[-16.0], np.arange(n - 1) - 16.0]),     # Q5_0 exact codes
    ]
    while len(blocks) < N_DQ[32] + 8:
        scale = 10.0 ** rng.uniform(-4, 3)
        if len(blocks) % 3 == 0:
            blocks.append(rng.standard_t(2, n) * scale)   # heavy tail
        else:
            blocks.append(g(n) * scale + rng.uniform(-1, 1) * scale)
    return np.concatenate(blocks).astype(np.float32)


def kquant_sources(rng):
    """Super-blocks of 256 covering the K-quant searches' edge cases."""
    n = 256
    g = rng.standard_normal
    sub_scaled = g(n) * np.repeat(10.0 ** np.linspace(-4, 2, 16), 16)
    one_zero_sub = g(n)
    one_zero_sub[64:96] = 0
    one_zero_sub[200:216] = 0
    outlier = g(n) * 1e-3
    outlier[77] = 50.0
    blocks = [
        np.zeros(n),                           # all zero
        g(n),                                  # plain
        rng.standard_t(3, n),                  # heavy tail
        rng.uniform(0, 1, n),                  # all positive: min clamps to 0
        -rng.uniform(0, 1, n),                 # all negative
        np.full(n, 0.25),                      # constant
        sub_scaled,                            # sub-block scales 1e-4 .. 1e2
        one_zero_sub,                          # zero sub-blocks: codes from pass 1
        outlier,                               # one outlier
        g(n) / 3 * 6e4,                        # near f16's range
        g(n) * 1e-7,                           # super-scale underflows in f16
        g(n) * 1e-12,                          # above the zero threshold, scales underflow
        g(n) * 1e-30,                          # below the all-zero threshold (1e-15); not
                                               # subnormals: ggml's searches overflow on those
        np.where(np.arange(n) == 131, -2.5, 0.0),  # single value
        rng.uniform(-1, 1, n) * 7.0,
        g(n) * 3.0 + 1.0,                      # offset
    ]
    return np.concatenate(blocks).astype(np.float32)


def f16_sources(rng):
    """Floats that exercise f32 -> f16/bf16 rounding: ties at both widths,
    subnormal boundaries, overflow to infinity, signed zeros, infinities."""
    vals = [0.0, -0.0, np.inf, -np.inf, 65504.0, 65519.99, 65520.0, -65520.0, 1e10,
            2.0 ** -14, 2.0 ** -24, 2.0 ** -25, 2.0 ** -25 * 1.0000001, 3 * 2.0 ** -25,
            2.0 ** -26, 1e-8, 6.1e-5, 1e-45, -1e-45, 3.4e38, 1.0, -1.0, 0.1, 1.0 / 3]
    bits = []
    # exact halfway points between adjacent f16 (even and odd lower neighbour),
    # one ulp (f32) either side, over normal and subnormal f16 exponents
    for h in rng.integers(1, 0x7bff, 300):
        lo = np.array([h], np.uint16).view(np.float16).astype(np.float32)[0]
        hi = np.array([h + 1], np.uint16).view(np.float16).astype(np.float32)[0]
        mid = np.float32((np.float64(lo) + np.float64(hi)) / 2)
        b = int(np.array([mid], np.float32).view(np.uint32)[0])
        bits += [b, b - 1, b + 1]
    # bf16 ties: low 16 bits exactly 0x8000, with even and odd upper halves
    for u in rng.integers(0, 0x7f7f, 200):
        bits += [int(u) << 16 | 0x8000, (int(u) << 16 | 0x8000) ^ 0x80000000,
                 int(u) << 16 | 0x7fff, int(u) << 16 | 0x8001]
    arr = np.concatenate([np.array(vals, np.float32),
                          np.array(bits, np.uint32).view(np.float32),
                          (rng.standard_normal(400) * 10.0 ** rng.uniform(-9, 5, 400)).astype(np.float32),
                          rng.integers(0, 2 ** 32, 200, dtype=np.uint64).astype(np.uint32).view(np.float32)])
    return arr


def bf16_nans():
    return np.array([0x7f800001, 0x7fc00000, 0xffc00001, 0x7fffffff, 0xff800100, 0x7f80ffff],
                    np.uint32).view(np.float32)


# ---------------------------------------------------------------- generated bulk

GOLDEN = 0x9E3779B97F4A7C15
U64 = np.uint64


def splitmix64(k, seed):
    """Output number k (0-based) of splitmix64 started at state = seed."""
    z = U64(seed) + (k + U64(1)) * U64(GOLDEN)
    z = (z ^ (z >> U64(30))) * U64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> U64(27))) * U64(0x94D049BB133111EB)
    return z ^ (z >> U64(31))


def gen_blocks(seed, n_block, be):
    """Blocks of be floats, exactly as test_quant.c's gen_blocks(). Per block
    one draw r0, then per group of 16 one draw r and 16 element draws z:
      r0: base exponent (r0 & 15) - 4, spread {0,2,6,20}[(r0 >> 4) & 3],
          mode (r0 >> 6) & 7 (0-3: one shape for all groups, 4-7: per group),
          bit 9: negate the one-signed shape
      r:  group exponent e = base - r % (spread + 1); shape (r >> 32) & 3 in
          the per-group modes
      z:  a = (z & 0xfff) - 2048, b = ((z >> 12) & 0xfff) - 2048;
          shape 0: a * 2^(e-11)     uniform
          shape 1: a*b * 2^(e-22)   peaked, long tails
          shape 2: +-|a| * 2^(e-11) one-signed
          shape 3: a*b * 2^(e-22) when (z >> 24) & 7 == 0, else 0 (sparse)
    Every value is an integer below 2^24 times a power of two: exact in f32."""
    g = be // 16
    per_block = 1 + g * 17
    k = np.arange(n_block * per_block, dtype=U64)
    z = splitmix64(k, seed).reshape(n_block, per_block)
    r0 = z[:, 0]
    grp = z[:, 1:].reshape(n_block, g, 17)
    r, el = grp[:, :, 0], grp[:, :, 1:]
    base = (r0 & U64(15)).astype(np.int64) - 4
    spread = np.array([0, 2, 6, 20], dtype=np.int64)[((r0 >> U64(4)) & U64(3)).astype(np.int64)]
    mode = ((r0 >> U64(6)) & U64(7)).astype(np.int64)
    neg = ((r0 >> U64(9)) & U64(1)).astype(bool)
    e = base[:, None] - (r % (spread[:, None] + 1).astype(U64)).astype(np.int64)
    shape = np.where(mode[:, None] < 4, mode[:, None], ((r >> U64(32)) & U64(3)).astype(np.int64))
    shape = shape[:, :, None]
    a = (el & U64(0xFFF)).astype(np.int64) - 2048
    b = ((el >> U64(12)) & U64(0xFFF)).astype(np.int64) - 2048
    sparse = ((el >> U64(24)) & U64(7)) == 0
    one_signed = np.where(neg[:, None, None], -np.abs(a), np.abs(a))
    v = np.select([shape == 0, shape == 1, shape == 2],
                  [a, a * b, one_signed], np.where(sparse, a * b, 0))
    shift = np.where((shape == 1) | (shape == 3), 22, 11)
    x = np.ldexp(v.astype(np.float32), (e[:, :, None] - shift).astype(np.int32))
    return x.astype(np.float32).reshape(-1)


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


# ---------------------------------------------------------------- writing

def write_fixture(path, qtype, be, bb, raw, deq, src, ref, q_source, gen_seed, hashes):
    n_dq = raw.size // bb
    n_q = 0 if ref is None else ref.size // bb
    n_gen = len(hashes) * GEN_CHUNK
    with open(path, "wb") as f:
        f.write(MAGIC)
        f.write(struct.pack("<10I", VERSION, int(qtype), be, bb, n_dq, n_q,
                            q_source if n_q else SRC_NONE, n_gen, gen_seed, GEN_CHUNK))
        f.write(raw.astype(np.uint8).tobytes())
        f.write(deq.astype(np.float32).tobytes())
        if n_q:
            f.write(src.astype(np.float32).tobytes())
            f.write(ref.astype(np.uint8).tobytes())
        for h in hashes:
            f.write(struct.pack("<Q", h))


def bits_equal(a, b):
    return np.array_equal(np.asarray(a, np.float32).view(np.uint32),
                          np.asarray(b, np.float32).view(np.uint32))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ggml-src", help="ggml dir of a llama.cpp tree (see the file comment)")
    ap.add_argument("--no-ggml", action="store_true", help="write without ggml's K-quant bytes")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests",
                                                  "fixtures", "quant"))
    args = ap.parse_args()
    if not args.ggml_src and not args.no_ggml:
        ap.error("--ggml-src DIR is required (or --no-ggml to skip the K-quant quantize data)")
    ggml = Ggml(args.ggml_src) if args.ggml_src else None
    # edge blocks overflow 1/d on purpose (numpy would warn about each one)
    np.seterr(all="ignore")
    os.makedirs(args.out, exist_ok=True)

    total = 0
    for i, (name, qtype, be, bb, fields, q_src, suffix) in enumerate(TYPES):
        rng = np.random.default_rng(20240601 + i)
        # D: raw blocks and reference dequantization
        if be == 1:
            raw = np.concatenate([np.array([0, 0x8000, 1, 0x8001, 0x3ff, 0x400, 0x7bff, 0x7c00,
                                            0xfc00, 0x7c01, 0x7e00, 0xfe00, 0x7fff, 0x3c00, 0x7f80,
                                            0xff80, 0x7fc0, 0x0080, 0x007f], np.uint16),
                                  rng.integers(0, 65536, N_DQ[1], dtype=np.uint16)]).view(np.uint8)
        else:
            raw = random_blocks(rng, bb, N_DQ[be], fields)
        if qtype == GT.Q8_K:
            blocks = raw.reshape(-1, bb)
            d = blocks[:, :4].copy().view(np.float32)
            q = blocks[:, 4:260].copy().view(np.int8).astype(np.float32)
            deq = (d * q).reshape(-1)
        else:
            deq = gq.dequantize(raw.copy(), qtype).reshape(-1).astype(np.float32)
        if ggml and suffix:
            g = ggml.dequantize(suffix, raw, bb, be)
            assert bits_equal(g, deq), f"{name}: gguf-py and ggml dequantize differently"

        # Q: source floats and reference quantization
        if be == 1:
            src = f16_sources(rng)
            if qtype == GT.BF16:
                src = np.concatenate([src, bf16_nans()])
                ref = gq.quantize(src, qtype).reshape(-1).view(np.uint8)
            else:  # numpy keeps NaN payloads where ggml writes 0x7e00: no NaN here
                src = src[~np.isnan(src)]
                ref = src.astype(np.float16).view(np.uint8)
            q_source = SRC_GGUF
        elif be == 32:
            src = legacy_sources(rng)[: (N_DQ[32] + 8) * 32]
            ref = gq.quantize(src, qtype).reshape(-1)
            if ggml:
                g = ggml.quantize(suffix, src, bb, be)
                assert np.array_equal(g, ref), f"{name}: gguf-py and ggml quantize differently"
            q_source = SRC_GGUF
        else:
            src = kquant_sources(rng)
            ref = ggml.quantize(suffix, src, bb, be) if ggml else None
            q_source = SRC_GGML

        # H: generated bulk, hashed
        gen_seed = 0x51A7E000 + i
        hashes = []
        if be > 1 and (q_src == SRC_GGUF or ggml):
            gsrc = gen_blocks(gen_seed, N_GEN[be], be)
            if q_src == SRC_GGUF:
                gref = gq.quantize(gsrc, qtype).reshape(-1)
                if ggml:
                    g = ggml.quantize(suffix, gsrc, bb, be)
                    assert np.array_equal(g, gref), f"{name}: gguf-py and ggml differ on bulk data"
            else:
                gref = ggml.quantize(suffix, gsrc, bb, be)
            chunk = GEN_CHUNK * bb
            hashes = [fnv1a64(gref[c:c + chunk].tobytes()) for c in range(0, gref.size, chunk)]

        path = os.path.join(args.out, f"{name}.bin")
        write_fixture(path, qtype, be, bb, raw, deq, src, ref, q_source, gen_seed, hashes)
        size = os.path.getsize(path)
        total += size
        print(f"{path}: {raw.size // bb} D blocks, {0 if ref is None else ref.size // bb} Q blocks, "
              f"{len(hashes) * GEN_CHUNK} H blocks, {size} bytes")
    print(f"total {total} bytes")


if __name__ == "__main__":
    main()
