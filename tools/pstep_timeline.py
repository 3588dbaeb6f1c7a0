#!/usr/bin/env python3
"""Reads the timeline of one persistent decode step and says where HBM waited.

The library records it when built with -DHR_PSTEP_TIMELINE=ON and run with
HEADROOM_CUDA_PSTEP_TIMELINE=step:file (graphs off, so that the step is an
eager launch), e.g.

  HEADROOM_CUDA_PSTEP_TIMELINE=150:/tmp/tl.bin headroom bench --device cuda \
      --synthetic llama2-7b --prompt 128 --gen 256 --graphs off
  python3 tools/pstep_timeline.py /tmp/tl.bin

The file (src/backend/cuda/persistent.cu, timeline_write): int32 blocks, ops,
stages, pieces and ops recorded a block, piece bytes, slots an op; per op int32
kind, N, K, pair; then per block, %globaltimer ns: for each piece {copy issued,
seen landed, consumption started, released} (warp 0), for each op {arrival at
the barrier after it, barrier passed, (a GEMV) thread 0's part of x stored, the
arrival's release done, (an attention) q in, warp 0's keys done, the warps
merged, the split's partial out (or, its head's last split, the head merged)}.

Prints: the copies' latency and how long landed pieces waited for the
consumers (over all, and in each kind of GEMV's body), the ring's state when
each kind of op starts, how long the barriers' release fences took, where an
attention's time goes, and the rate at which bytes landed over each tenth of
each kind of GEMV (GPU-wide).
"""
import sys

import numpy as np

KINDS = {0: "embed", 1: "norm", 2: "gemv", 3: "attn", 4: "swiglu", 5: "gather"}


def load(path):
    raw = open(path, "rb").read()
    hdr = [int(v) for v in np.frombuffer(raw[:28], np.int32)]
    blocks, n_op, stages, n_pieces, n_ops, piece, slots = hdr
    ops = np.frombuffer(raw[28:28 + 16 * n_op], np.int32).reshape(n_op, 4)
    rec = np.frombuffer(raw[28 + 16 * n_op:], np.uint64).reshape(blocks, n_pieces * 4 + n_ops * slots)
    rec = rec.astype(np.int64)
    pieces = rec[:, :n_pieces * 4].reshape(blocks, n_pieces, 4)
    barriers = rec[:, n_pieces * 4:].reshape(blocks, n_ops, slots)[:, :n_op]
    return dict(blocks=blocks, stages=stages, piece=piece, ops=ops, pieces=pieces,
                barriers=barriers)


def block_rows(n, b, blocks):
    return n * b // blocks, n * (b + 1) // blocks


def first_pieces(t):
    """first[b][j]: block b's first piece of the j-th GEMV (as produce() walks them)"""
    ops, blocks, piece = t["ops"], t["blocks"], t["piece"]
    gemvs = [i for i in range(len(ops)) if ops[i, 0] == 2]
    first = np.zeros((blocks, len(gemvs) + 1), np.int64)
    for b in range(blocks):
        c = 0
        for j, i in enumerate(gemvs):
            n, k, pair = (int(v) for v in ops[i, 1:])
            r0, r1 = block_rows(pair or n, b, blocks)
            c += (2 if pair else 1) * -(-((r1 - r0) * k * 2) // piece)
            first[b, j + 1] = c
    return gemvs, first


def rel(stamps, t0):
    """ns after t0 as floats; a stamp never written (0: a kernel form that
    skips it, e.g. an op without a barrier) is NaN and left out of every
    figure"""
    return np.where(stamps > 0, (stamps - t0).astype(np.float64), np.nan)


def main(path):
    t = load(path)
    ops, blocks, stages, piece = t["ops"], t["blocks"], t["stages"], t["piece"]
    raw = t["pieces"]
    used = int((raw[:, :, 0] > 0).sum(axis=1).max())
    t0 = raw[:, 0, 0].min()
    p = rel(raw, t0)
    issue, land, start, release = (p[:, :used, c] for c in range(4))
    arrive, passed, x_stored, released = (rel(t["barriers"][:, :, c], t0) for c in range(4))
    gemvs, first = first_pieces(t)
    if int(first[:, -1].max()) != used:
        sys.exit("pstep_timeline: the pieces recorded do not match the program")
    ok = np.arange(used)[None, :] < first[:, -1][:, None]
    span = max(np.nanmax(land[ok]), np.nanmax(release[ok]))
    print(f"{blocks} blocks, {len(ops)} ops, {stages} ring stages of {piece} B; step {span / 1e3:.1f} us, "
          f"{used} pieces a block at most")
    lat = (land - issue)[ok] / 1e3
    wait = (start - land)[ok] / 1e3
    busy = (release - start)[ok] / 1e3
    print(f"copy issued -> landed: mean {np.nanmean(lat):.2f} us (p10 "
          f"{np.nanpercentile(lat, 10):.2f}, p90 {np.nanpercentile(lat, 90):.2f})")
    print(f"landed -> consumption starts: mean {np.nanmean(wait):.2f} us (p50 "
          f"{np.nanpercentile(wait, 50):.2f}, p90 {np.nanpercentile(wait, 90):.2f}); warp 0 on a "
          f"piece: mean {np.nanmean(busy):.2f} us")

    # in each kind of GEMV's body (past the pieces in the ring when it
    # starts): a piece that waits long after landing means the consumers,
    # not HBM, set the pace
    body = {}
    for j, i in enumerate(gemvs):
        key = "N=%d K=%d%s" % (ops[i, 1], ops[i, 2], " pair" if ops[i, 3] else "")
        r = body.setdefault(key, [[], []])
        for b in range(blocks):
            q0, q1 = first[b, j] + stages, first[b, j + 1]
            r[0].extend((start[b, q0:q1] - land[b, q0:q1]) / 1e3)
            r[1].extend((release[b, q0:q1] - start[b, q0:q1]) / 1e3)
    print("\nin each GEMV's body: landed -> consumption starts (p50 / mean), "
          "warp 0 on a piece (mean):")
    for key, r in body.items():
        if np.isfinite(r[0]).any():
            print(f"  {key:22s} {np.nanpercentile(r[0], 50):5.2f} {np.nanmean(r[0]):5.2f} us   "
                  f"{np.nanmean(r[1]):5.2f} us")

    # the ring when an op starts, and what follows the barrier before a GEMV
    rows = {}
    for j, i in enumerate(gemvs):
        if i == 0:
            continue
        key = ("gemv N=%d K=%d%s after %s" % (ops[i, 1], ops[i, 2], " pair" if ops[i, 3] else "",
                                              KINDS[int(ops[i - 1, 0])]))
        r = rows.setdefault(key, [[], [], [], [], [], [], []])
        for b in range(blocks):
            q = first[b, j]
            ps = passed[b, i - 1]
            r[0].append(int((land[b, q:q + stages] <= ps).sum()))
            r[1].append((ps - arrive[b, i - 1]) / 1e3)
            r[2].append((x_stored[b, i] - ps) / 1e3)
            r[3].append((released[b, i - 1] - arrive[b, i - 1]) / 1e3)
            r[4].append((start[b, q] - ps) / 1e3)
            if q + stages < first[b, j + 1]:
                r[5].append((issue[b, q + stages] - ps) / 1e3)
                r[6].append((land[b, q + stages] - ps) / 1e3)
    print("\nat a GEMV's barrier (means over blocks; 'pass' is the block's own):")
    print(f"{'':44s} {'landed':>7s} {'arr->pass':>9s} {'->x stored':>10s} {'fence':>7s} "
          f"{'->1st use':>9s} {'->refill':>9s} {'->lands':>8s}")
    for key, r in rows.items():
        m = [np.nanmean(c) if np.isfinite(c).any() else np.nan for c in r]
        print(f"{key:44s} {m[0]:5.2f}/{stages} {m[1]:9.2f} {m[2]:10.2f} "
              f"{m[3]:7.2f} {m[4]:9.2f} {m[5]:9.2f} {m[6]:8.2f}")

    last = arrive.max(axis=0)
    lat_b = (passed - last[None, :]) / 1e3
    spread = (last - arrive.min(axis=0)) / 1e3
    fence = (released - arrive) / 1e3
    last_fence = fence[arrive.argmax(axis=0), np.arange(len(last))]
    release_to_pass = (np.median(passed, axis=0) - released.max(axis=0)) / 1e3
    for k in (2, 3):
        sel = ops[:-1, 0] == k
        print(f"barrier after {KINDS[k]}: arrivals spread {spread[:-1][sel].mean():.2f} us, "
              f"last arrival -> pass {np.nanmean(lat_b[:, :-1][:, sel]):.2f} us; release fence "
              f"{fence[:, :-1][:, sel].mean():.2f} us (the last arrival's {last_fence[:-1][sel].mean():.2f}), "
              f"last release -> pass {np.nanmean(release_to_pass[:-1][sel]):.2f} us")

    # the attentions, from each block's pass of the barrier before them
    att = [i for i in range(1, len(ops)) if ops[i, 0] == 3]
    B = t["barriers"]
    marks = []
    for i in att:
        has = B[:, i, 4] > 0  # blocks that had an item
        ps = B[has, i - 1, 1]
        marks.append(np.stack([B[has, i, c] - ps for c in (4, 5, 6, 7, 0)], axis=1) / 1e3)
    m = np.concatenate(marks) if marks else np.zeros((0, 5))
    if len(m):
        names = ("q in", "warp 0's keys", "warps merged", "split out", "arrival")
        print("\nattention, us after the block's pass (blocks with an item; p50 / mean / p90):")
        for c, name in enumerate(names):
            print(f"  {name:15s} {np.percentile(m[:, c], 50):5.2f} {m[:, c].mean():5.2f} "
                  f"{np.percentile(m[:, c], 90):5.2f}")
        phase = [(B[:, i, 1].max() - B[:, i - 1, 1].min()) / 1e3 for i in att]
        print(f"  first pass before to last pass after: {np.mean(phase):.2f} us; "
              f"{int((B[:, att[0], 4] > 0).sum())} of {blocks} blocks with an item")

    # GPU-wide landed rate over each tenth of each kind of GEMV
    landed = np.sort(land[ok][np.isfinite(land[ok])])

    def rate(a, b):
        return (np.searchsorted(landed, b) - np.searchsorted(landed, a)) * piece / (b - a) / 1e3

    prof = {}
    last_pass = passed.max(axis=0)
    for i in gemvs:
        if i == 0 or i + 1 >= len(ops):
            continue
        a, b = last_pass[i - 1], last_pass[i]
        edges = np.linspace(a, b, 11)
        key = "N=%d K=%d%s" % (ops[i, 1], ops[i, 2], " pair" if ops[i, 3] else "")
        prof.setdefault(key, []).append([rate(edges[e], edges[e + 1]) for e in range(10)] + [(b - a) / 1e3])
    print("\nbytes landed, GPU-wide TB/s, by tenths of each GEMV (barrier pass to pass):")
    for key, r in prof.items():
        m = np.mean(r, axis=0)
        print(f"{key:22s} {m[-1]:6.1f} us  " + " ".join(f"{v:4.2f}" for v in m[:10]))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: pstep_timeline.py FILE")
    main(sys.argv[1])
