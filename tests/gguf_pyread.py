#!/usr/bin/env python3
"""gguf_pyread.py — cross-check headroom's GGUF reader/writer with gguf-py.

Used by tests/test_gguf.c through popen:

  gguf_pyread.py read PATH     print PATH as gguf-py's GGUFReader sees it, in
                               the canonical text that test_gguf.c also prints
                               from its own reader; the test compares the two
  gguf_pyread.py write PATH    write a small model with gguf-py's GGUFWriter
  gguf_pyread.py write-be PATH the same, big-endian (the reader must refuse it)

Exit 77 when the gguf package is missing (the C test then skips this part).

Canonical text, one item a line:
  version V
  kv KEY TYPE VALUE              scalars; strings as hex; floats as %.9g/%.17g
  kv KEY array:TYPE N V1,V2,...  arrays (strings as hex)
  tensor NAME GGML_TYPE NE0,NE1.. N_BYTES ABS_OFFSET FNV1A64
"""
import sys

try:
    import gguf
    import numpy as np
except ImportError:
    print("SKIP: python gguf package not installed")
    sys.exit(77)

TYPE_NAMES = {
    0: "uint8", 1: "int8", 2: "uint16", 3: "int16", 4: "uint32", 5: "int32",
    6: "float32", 7: "bool", 8: "string", 9: "array", 10: "uint64", 11: "int64",
    12: "float64",
}


def fnv1a64(data: bytes) -> int:
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def fmt_scalar(t: int, part) -> str:
    if t == 8:
        return bytes(part).hex()
    v = part[0]
    if t == 6:
        return "%.9g" % float(v)
    if t == 12:
        return "%.17g" % float(v)
    if t == 7:
        return "1" if bool(v) else "0"
    return str(int(v))


def describe(path: str) -> None:
    r = gguf.GGUFReader(path)
    for name, f in r.fields.items():
        if name == "GGUF.version":
            print("version %d" % int(f.parts[f.data[0]][0]))
            continue
        if name.startswith("GGUF."):
            continue
        t = int(f.types[0])
        if t == 9:
            et = int(f.parts[3][0])  # kept even for empty arrays, unlike f.types
            vals = [fmt_scalar(et, f.parts[i]) for i in f.data]
            print("kv %s array:%s %d %s" % (name, TYPE_NAMES[et], len(f.data), ",".join(vals)))
        else:
            print("kv %s %s %s" % (name, TYPE_NAMES[t], fmt_scalar(t, f.parts[f.data[0]])))
    for t in r.tensors:
        shape = ",".join(str(int(d)) for d in t.shape)
        data = t.data.tobytes()
        assert len(data) == t.n_bytes
        print("tensor %s %d %s %d %d %016x" % (t.name, int(t.tensor_type), shape, t.n_bytes,
                                               t.data_offset, fnv1a64(data)))


def write(path: str, big: bool) -> None:
    endian = gguf.GGUFEndian.BIG if big else gguf.GGUFEndian.LITTLE
    w = gguf.GGUFWriter(path, "llama", endianess=endian)
    w.add_uint32("llama.block_count", 2)
    w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    w.add_bool("tokenizer.ggml.add_bos_token", True)
    w.add_string("general.name", "pyread-test")
    w.add_array("tokenizer.ggml.tokens", ["<s>", "</s>", "hello", "\u00e9t\u00e9"])
    w.add_array("tokenizer.ggml.scores", [0.0, -1.5, 2.25, 3.0])
    w.add_int64("x.i64", -(1 << 40))
    w.add_float64("x.f64", 0.1)
    rng = np.random.default_rng(7)
    w.add_tensor("tok_embd.weight", rng.standard_normal((3, 8)).astype(np.float32))
    w.add_tensor("norm.weight", rng.standard_normal(5).astype(np.float16))
    q8 = rng.integers(0, 256, size=(2, 34), dtype=np.uint8)  # 2 rows of one q8_0 block
    w.add_tensor("blk.0.attn_q.weight", q8, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("ids", np.arange(7, dtype=np.int32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main() -> int:
    if len(sys.argv) != 3 or sys.argv[1] not in ("read", "write", "write-be"):
        print(__doc__, file=sys.stderr)
        return 2
    if sys.argv[1] == "read":
        describe(sys.argv[2])
    else:
        write(sys.argv[2], sys.argv[1] == "write-be")
    return 0


if __name__ == "__main__":
    sys.exit(main())
