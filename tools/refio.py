"""Writing headroom's reference fixtures (shared by the tools/make_*_reference.py).

reference.bin: magic "HRREF001", u32 version 1, u32 T, u32 V, u32 n_full,
i32 tokens[T], u32 full_pos[n_full], f32 logits[n_full][V], f32 nll[T-1],
f64 perplexity, u32 n_greedy, i32 greedy[n_greedy]. Read by
tests/test_model_reference.c and tests/test_smollm2.c.
"""
import struct


def write_reference(path, ids, logits, nll, ppl, greedy, full_pos):
    T, V = len(ids), logits.shape[1]
    with open(path, "wb") as f:
        f.write(b"HRREF001")
        f.write(struct.pack("<IIII", 1, T, V, len(full_pos)))
        f.write(struct.pack(f"<{T}i", *ids))
        f.write(struct.pack(f"<{len(full_pos)}I", *full_pos))
        for p in full_pos:
            f.write(logits[p].numpy().astype("<f4").tobytes())
        f.write(struct.pack(f"<{T - 1}f", *nll))
        f.write(struct.pack("<d", ppl))
        f.write(struct.pack("<I", len(greedy)))
        f.write(struct.pack(f"<{len(greedy)}i", *greedy))
