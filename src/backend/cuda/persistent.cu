/*
 * persistent.cu — a decode step of one row as one kernel.
 *
 * Why: at batch 1 the step reads every weight once (13.5 GB for Llama-2-7B)
 * and does little else, so its speed is the rate at which HBM streams the
 * weights. Launched op by op, each of the step's 129 GEMVs loses a few
 * microseconds to its ramp and drain, and HBM idles during the small ops
 * between them: the kernels of gemv.cu stream at 3.0-3.9 TB/s back to back,
 * the step's matmuls all together at ~3.3 TB/s (H200, copy bandwidth 4.26).
 *
 * How: the backend records the step's ops as a program (ck_pstep_op, the
 * same ops with the same rounding points as the op-by-op path). One block
 * per SM runs it: 8 consumer warps do each op (all blocks share the work)
 * and meet at a grid-wide barrier before the next op; a ninth warp, the
 * producer, walks the same program and copies the block's share of every
 * matrix (a contiguous range of rows: rows are contiguous in memory) into
 * a ring of shared-memory stages with bulk copies (TMA), as far ahead as the
 * ring allows, at most kInFlight copies in flight at once (and the stages
 * freed by a GEMV's last kHold pieces refilled only once the block has
 * arrived at the barrier after it). The weights depend on no activation,
 * so the producer crosses the barriers:
 * while the consumers run the attention or wait at a barrier, the next
 * matrix is already on its way. The ring (as many 32 KB stages as fit
 * beside x, at most 6: 192 KB a block for Llama-2-7B, 25 MB over 132 SMs)
 * covers ~6 us of streaming.
 *
 * A GEMV: the block's rows [r0, r1) of W are one contiguous run of bytes,
 * cut into pieces of kPiece bytes (the last shorter); warp w takes the w-th
 * run of kSegPerWarp 512-byte segments of each piece (K % 256 == 0, so a
 * segment lies inside one row), loads them and the matching x (copied to
 * shared memory first) before any arithmetic, and keeps a running sum for
 * the row in tensor-core accumulators (seg_dot); when a run starts another
 * row, the warp adds its lanes and writes the row's partial to its own slot
 * (acc[warp][row]), so the sums do not depend on timing: the same step
 * gives the same bits every time.
 * The backend folds each norm into the GEMV that reads it (every block
 * normalises the row itself: no op, no barrier) and each residual add into
 * the GEMV that made the addend (o and down add their rows to x).
 *
 * SwiGLU goes into the gate/up GEMV when each block's gate and up rows fit
 * its acc (a block takes gate rows [a, b) and up rows [F + a, F + b)).
 *
 * The other ops: embed (and swiglu, when not folded) spread over the
 * blocks; the final norm on block 0; the attention one (head, split) a
 * block, flash-decoding style, the last split of each head merging the
 * others' partials as they come (split_merge), with the rotations folded
 * in (q rotated on load, this step's k rotated from qkv and stored with v
 * by the first head of its group), the pool rows it reads prefetched into
 * L2 while the qkv GEMV streams.
 * While a block waits at the barrier before the qkv GEMV it issues what
 * the attention after it needs that no op writes: its K/V prefetch. (The
 * next norm's weights were loaded there too until registers ran short:
 * "Landed later" below.)
 *
 * Measured (H200, Llama-2-7B, 128-token prompt, 256 new, 2026-11-30): 246.5
 * tok/s bf16, 247.4 f16, against 232.2 op by op; 248.0 with 6 stages and
 * SwiGLU in the gate/up GEMV; 251.7 bf16, 251.2 f16 with the dot products
 * on the tensor cores (seg_dot), the norm's x and w loaded together, and
 * the attention's first keys loaded with q; 254.2 bf16, 254.0 f16 with the
 * barrier's arrival a release reduction and the epilogue's loads moved to
 * the GEMV's start (re-measured in five later calls: 250.6-253.6). Per op
 * at 246.5, from HEADROOM_CUDA_PSTEP_TRACE: a GEMV 27.1 us on average (~3.7
 * TB/s with its barrier), the attention 10.4 us, swiglu 1.6, a barrier 0.2.
 * The way there, per GEMV:
 * warps taking every 8th segment with a division per segment, 49 us (the
 * consumers, not HBM, were the limit: with their arithmetic left out the
 * stream took 24 us); runs of consecutive segments, bit-shift bf16
 * unpacking, all loads first, 29 us; 32 KB pieces x 5 instead of 16 KB x
 * 10, 26.7 us; 20 KB x 9 31.1, 16 KB x 11 29.6 (runs across rows then go
 * the slow way); the norms as their own ops on block 0 cost 7 us each
 * before they were folded into the GEMVs. Rejected: L2 prefetches (bulk
 * prefetch.L2) 128, 190 or 320 KB a block ahead of the copies, so that HBM
 * would stream on while the ring is full: 229.8, 223.5, 200.4 tok/s.
 *
 * Rejected later (H200, 2026-11-30, bench/results/2026-11-30-h200-pstep-
 * experiments.jsonl; switches in a build whose own baseline was 246.8):
 * weights prefetched into L2 32 or 64 KB ahead of the ring, 197 from
 * 217.5 (the build's first baseline); prefetched only while a block's ring
 * is full and its consumers wait (at most 2, 4, 8 pieces beyond it, with or
 * without evict_last), 221.6-232.1 against 246.8. A block that waits spends
 * HBM bandwidth the slowest block needs to reach the barrier. The barrier's
 * polls relaxed with one acquire fence after, or without the nanosleep: no
 * change (216.9, 217.2, 217.5 against 217.5). No grid barrier at
 * all: every activation between ops as 8-byte slots (the f32 value and the
 * epoch of the op that wrote it, one 64-bit store), a reader spinning on
 * the slots it reads, so data and readiness come in one L2 round trip and
 * an attention item waits only for the blocks that made its q, k, v (the
 * host linked the program: buffers to slot arrays, epochs per op). Correct
 * (test_cuda_pstep 40/40, test_backend_ops), but slower: 220.0 when a
 * thread waited on its slots one after another, 251.1 against 253.6 with
 * all of a thread's missing slots polled again together each round; the
 * first form with a sleep between polls 194.4 (64 ns), 184.8 (256), 142.9
 * (1024). Twice the bytes of x per block (8 a value), and every block's
 * 256 threads polling where one thread polled a counter, cost what the
 * round trip saved.
 *
 * Landed later (H200, 2026-11-30, bench/results/2026-11-30-h200-pstep-
 * kv-prefetch.jsonl, two rounds in one call, tok/s): the K and V rows of
 * each block's attention items bulk-prefetched into L2 before the qkv GEMV
 * (attn_prefetch; +0.6-0.7% in the experiment builds above) 253.2, 251.8
 * against 252.0, 252.1; with the splits' merge on one acq_rel atomic after
 * the block barrier (no __threadfence by every thread, before and after)
 * and its loads issued four splits at a time, 254.0, 253.6.
 *
 * Landed later (bench/results/2026-11-30-h200-pstep-attn-keys.jsonl): the
 * attention's K and V kept as loaded (16-bit) in registers, so a warp
 * holds 8 keys a round instead of 4 as f32 (kAttKeys): 257.2, 256.3
 * against 253.9, 253.7 at 128..384 positions; 236.7, 237.1 against 220.8,
 * 221.1 at 1024..1280. 12 keys: 254.6, 252.9 (the kernel at its 168
 * registers, with spills, its GEMVs 26.99 against 26.07 us in the trace),
 * 233.4 at 1024. Head size 64 (tinyllama-1.1b shape): 8 keys 937.4, 943.4
 * against 916.6, 918.6, and 793.5, 792.9 against 700.3, 703.0 at 1024;
 * 16 keys 931.8, 933.6 and 778.8, 780.0.
 *
 * Rejected later (same file, one call, a build whose own baseline was
 * 252.6 against main's 253.7): the next GEMVs' pieces beyond the ring
 * prefetched into L2 at the attention's start, when no block is waiting
 * on HBM for its own op, 2, 4, 8, 16 pieces a block: 252.4, 249.8, 246.6,
 * 239.6 (the trace: the attention 8.16 -> 10.78 us with 4, its L2 loads
 * queued behind the prefetches; the GEMVs 26.87 -> 26.46); a GEMV's x
 * kept in registers where each warp meets the same columns in every piece
 * (K 2048 .. 16384: half the shared-memory reads of a piece), 250.7
 * against 252.6: the consumers' shared-memory traffic is not what limits.
 * The same prefetch issued after the attention instead (its loads no
 * longer behind it), 2 or 4 pieces a block: 256.8, 257.0 and 256.0,
 * 256.2 against main's 256.9, 257.1 (another call).
 *
 * A timeline of one step (a -DHR_PSTEP_TIMELINE=ON build, tools/
 * pstep_timeline.py; H200, 2026-11-30, bench/results/2026-11-30-h200-
 * pstep-timeline.jsonl) shows where HBM waits. When a block passes the
 * barrier before a GEMV, its ring holds that GEMV's first 6 pieces, all
 * landed (99% of the blocks), and nothing more can be issued until the
 * consumers free a stage: the last arrival to the pass takes 2.5 us, x
 * (and the norm) 1.4 us (o) to 3.3 us (qkv, behind the K/V prefetch's
 * issue), the first piece and its release 1 us, the refill 1.8 us to
 * land. So each GEMV starts with 3-5 us in which HBM delivers almost
 * nothing GPU-wide (0-0.3 TB/s in its first tenths, 3.5-4.6 after), and
 * nothing lands during the attention (the rings are full when it starts).
 * A copy takes 3.2 us to land and a landed piece waits 3.2 us for the
 * consumers, on average. More buffer of the kinds tried does not bridge
 * it (same file, one call each, tok/s): 5 ring stages instead of 6,
 * 258.7, 258.4 against 258.8, 258.8 (so the ring is not short in the
 * GEMVs' bodies); each warp moving one landed piece of the next GEMV into
 * registers while it waits at the barrier, so the stage refills (x loaded
 * by cp.async to make room: that alone 258.8, 258.8 against main's 259.5,
 * 259.7; more than one piece spills), 259.3, 259.1; the consumer threads
 * prefetching (prefetch.global.L2, a line each) the 2, 4, 8 pieces after
 * the ring at a GEMV's start, 252.3, 248.1, 240.4 (x's loads queue behind
 * them), or once x is in, 258.4, 256.1 (2, 4) against 258.8; the K/V
 * prefetch moved after the qkv GEMV's x load, 257.0, 257.5 against 258.7,
 * 259.2; or issued by the producer as it reaches the qkv GEMV, 254.5,
 * 254.5 against 256.7, 256.8. What would bridge it is a GEMV whose
 * consumers need not wait for the whole of x (or no barrier), or ~5 us
 * more of in-flight weights per SM than shared memory holds.
 *
 * Landed later (H200, 2026-12-01, bench/results/2026-12-01-h200-pstep-
 * wait-window.jsonl, tok/s, three rounds against main in one call): the
 * barrier split in two, and between its halves (thread 0 polling) warps
 * 1..7 issue the next attention's K/V prefetch (it was issued at the qkv
 * GEMV's start, ahead of its x) and every thread loads the next norm's
 * weights: 259.9, 259.9, 258.5 against 256.0, 255.4, 256.6 (the K/V part
 * alone 259.2, 258.4, 259.0). The timeline: x stored after the pass 1.9
 * us at qkv (was 3.4), 1.7 at gate/up (2.2). Also tried: the next GEMV's
 * x lines prefetched into L2 in the same window, 256.5, 256.3 against
 * 257.0, 256.8 (another call): rejected.
 *
 * Landed later (H200, 2026-12-01, bench/results/2026-12-01-h200-pstep-
 * inflight.jsonl; timelines with a stamp after the arrival's release):
 * after a GEMV the arrival's release fence took 2.3-3.9 us on average
 * (the last block's 1.1-3.7), after the attention 0.4; with the epilogue's
 * stores left out (measurement only) it still took 2.3-4.1, and with a
 * relaxed arrival (no fence; measurement only, not correct by the memory
 * model) the step ran 264.0, 264.0, 263.7 against 259.2, 258.8, 259.7, the
 * arrival itself then late only after the o GEMV (3.8 us). So the fence
 * waits for the block's weight copies in flight, and the block's requests
 * queue behind them. At most kInFlight copies in flight, the rest of the
 * ring landed: 2, 265.5, 265.9 against 260.8, 260.8; 3, 259.7, 260.0
 * (copies land in 2.2 us instead of 3.1, arrivals spread 2.0 us instead of
 * 3.8, the fence still 1.9-3.0); 4, 259.4, 257.7; 1, 260.8, 261.3; as
 * committed 265.7, 266.0 against 260.7, 260.7 (test_cuda_pstep 40/40; 32k
 * context 114.1 against 113.9).
 *
 * Landed later (H200, 2026-12-01, bench/results/2026-12-01-h200-pstep-
 * hold.jsonl, tok/s, libraries swapped in one call, two rounds): the
 * refills of the stages that a GEMV's last 3 pieces free wait for the
 * block's arrival at the barrier after it (kHold): 270.4, 269.9 against
 * 268.1, 268.3; in two later calls 267.9, 268.3 against 266.0, 266.1 and
 * 268.2, 268.4 against 266.1, 264.9 (test_cuda_pstep 40/40). Its timeline:
 * the GEMV barriers' release fence 0.96-1.45 us (1.45-1.59 without), x in
 * 2.6-2.8 us after the pass at qkv and gate/up (1.9 without: the held
 * refills go out with x's loads). 4 held, 269.0, 268.6; 3 held and 3 in
 * flight, 266.4, 265.8. Rejected: the held pieces bulk-prefetched into L2
 * as their stages came free, the first only 266.8, 266.3, all of them
 * 258.8, 259.1 (against 267.9, 268.3 held alone); the hold released once
 * the next GEMV's x is in rather than at the arrival (x in after 1.4-2.1
 * us again, but each GEMV's first tenth streams less), 2 held 268.5,
 * 268.9, 3 held 269.2, 268.5, 4 held 265.2, 265.6 against 268.2, 268.4:
 * no better than the simpler form. A relaxed arrival (measurement only)
 * ran 275.0, 274.9 against 268.1, 268.3: the fence still takes ~1 us
 * under the weights' stream with the block's last refills held, so only
 * a publication that needs no release fence (values tagged with the step,
 * checked by their readers) would take that back.
 * Rejected the same day: the attention's round of 8 keys scored together,
 * one rescale a round rather than one a key, with the next round's rows
 * prefetched into L1: 261.5, 261.1 against 265.5, 265.6 (without the L1
 * prefetch 262.4, 262.9), and wrong (test_cuda_pstep: 6 of 40 failed, at
 * llama2-7b, llama3-8b and tinyllama-1.1b bf16); the cause was not found.
 *
 * Landed later (H200, 2026-12-01, bench/results/2026-12-01-h200-pstep-
 * cross.jsonl): the down GEMV (K = 11008 for Llama-2-7B) was the one the
 * consumers paced. In its body a landed piece waited 3.7 us for them
 * (0-0.3 in qkv, gate/up and the lm head; 0.8 in o), and HBM delivered
 * 3.3-3.7 TB/s there against 4.1-4.4 in gate/up: its 43-segment rows put
 * a run across a row boundary in 95% of its pieces, and such a run went
 * segment by segment (warp 0 took 1.77 us on a piece where its run
 * crossed, 0.46 where not). Of the 875 us a step lost against 4.4 TB/s in
 * one timeline (a step of 3928 us), the down GEMVs lost 262, the
 * attentions 208, o 157, qkv 140, gate/up 105. A run across one row
 * boundary now loads two segments at a time and switches rows once: 276.7,
 * 276.8 against 267.5, 267.3 (four segments at a time, 274.4, 274.1;
 * test_cuda_pstep 40/40); in its timeline the down GEMV takes 25.9 us
 * (30.3), a landed piece waits 1.8 us there, 3.6-4.3 TB/s in its middle.
 *
 * Landed later (H200, 2026-12-01, bench/results/2026-12-01-h200-pstep-
 * attn-wait.jsonl, three calls): each op waits at the barrier before it
 * in its own turn of the program loop, so the norm weights preloaded for a
 * GEMV no longer live across the other ops (282.6, 280.8 against 277.8,
 * 279.5), and the attention waits there itself once it has its angles and
 * its first round's pages (the block table entries, lane u holding row
 * u's): 280.5, 279.9 / 283.2, 282.9 / 280.2, 279.3 against 275.1, 275.3 /
 * 277.8, 279.5 for the commit before (test_cuda_pstep 40/40). With the
 * angles after the wait, 279.6, 278.3; its timeline has q in 2.6 us after
 * the pass (3.0 before). Rejected: the first round's rows loaded before
 * the wait too: q in 1.0 us after the pass and the attention's arrival 4.5
 * us (6.5), but the barrier slower (last release to pass 1.55 us, 0.8
 * without: 4 MB of rows in L2's way) and 275.1, 275.6 against 280.2,
 * 279.3. A round's scores together (their shuffles interleaved, one
 * rescale a round, a key past the split left out rather than weighted 0,
 * which the wrong form above may have done): correct (40/40) but 281.0,
 * 281.6 against 283.2, 282.9 (24 bytes spilled). Rejected in a later
 * call: the next 4, 8 or 12 pieces after the ring bulk-prefetched into L2
 * by the producer while the consumers are in the attention (the ring full,
 * HBM idle): 276.3; 273.0, 273.2; 270.7 against 279.9, 279.1 (correct,
 * test_cuda_pstep 40/40). As the rows loaded before the wait above, L2
 * traffic during the attention and its barrier costs more than the HBM
 * time it saves: the attention phase is bound by L2 round trips.
 *
 * Landed later (H200, 2026-12-01, bench/results/2026-12-01-h200-pstep-
 * scores-together.jsonl, two calls, two rounds each): no norm weights
 * preloaded at the barrier (they load after it, beside x) and a round's
 * scores together (above): the kernel spills nothing. 287.0, 287.0 against
 * 283.4, 283.8 for the commit before, and 282.7, 283.4 against 280.5,
 * 279.4 in the next call (test_cuda_pstep 40/40 for the same arithmetic
 * with the hold below). The preload alone left out: 285.0, 285.0. Also
 * measured (first call): the K/V prefetch left out, 284.9, 285.5; issued a
 * GEMV earlier, 285.2, 285.1; on top of this commit, left out: 283.5, 282.3
 * (second call): no clear gain, kept. 16 KB pieces (12 stages, 4 in
 * flight, 6 held) 227.0, 226.5; 24 KB (8 stages, 2 in flight, 4 held)
 * 213.3, 212.2: rejected. The qkv GEMV's held refills released only once
 * the attention's q was in (so that they do not queue before its loads),
 * without the K/V prefetch: 281.8, 282.0; once its keys were in, 281.4,
 * 281.4; with the prefetch, 280.9, 281.1 (against 283.5, 282.3): rejected.
 * In two later calls (bench/results/2026-12-01-h200-pstep-tagged.jsonl)
 * this commit ran 287.2, 286.9 and 282.9, 283.5 (test_cuda_pstep 40/40).
 * Beside it, knobs: kHold 2, 281.3, 281.7; 4, 281.9, 282.6; kInFlight 3,
 * 278.8, 279.3; the barrier's poll sleeping 64 ns, 282.9, 283.6; the K/V
 * prefetch left out, 283.6, 283.7: none kept.
 *
 * Rejected (same file, branch wip/tagged): tagged words (16 bits of ck and
 * a 16-bit tag of the step and op) from qkv to the attention, from it to
 * o and from gate/up to down, the arrival before such a reader relaxed
 * (no release fence: the readers check the tags and load again until
 * they match): 264.8, 264.5 against 287.2, 286.9, with 6 of x's tagged
 * words in flight a thread 278.6, 278.6; no grid barrier before such a
 * reader at all (the readers poll, one lane a warp first) 263.0, 263.2.
 * All correct (test_cuda_pstep 40/40). x as 32-bit words is twice the
 * bytes, and the kernel spilled 96-192 bytes; in the timeline the GEMV
 * bodies' landed pieces waited longer for the consumers (o 1.43 us against
 * 0.83, down 2.33 against 1.58) while the relaxed arrivals' fence fell
 * from 1.3 to 0.5-0.7 us. The spills came from the kernel holding two
 * copies of the x-load loop, plain and tagged (two identical copies spill
 * too). With one loop for both (no spills; the branch's head 559ca93, one
 * later call, two rounds) still slower: A 280.0, 279.6 and B 278.9, 277.2
 * against 283.5, 281.9 for this commit; without the SwiGLU product tagged
 * (its K = 11008 takes two round trips of tagged loads) A 279.8, 279.9, B
 * 278.9, 277.4 (test_cuda_pstep 40/40 for both).
 *
 * Rejected (H200, 2026-12-01, bench/results/2026-12-01-h200-pstep-by-head.
 * jsonl, three calls, branch wip/byhead): the o projection started by head
 * as the attention's heads come out, with no barrier before it (when the
 * attention starts, the rings already hold 25 of o's 33.5 MB, and HBM
 * idles until o's consumers free them). Each warp takes the segments of
 * its run in order, waits until their heads are out (the head's merge
 * publishes it with release; warp 0 polls), and goes through each segment
 * in every piece the ring holds. Correct (test_cuda_pstep 40/40,
 * test_backend_ops 1190/1190) and slower: the stages freed as each warp was
 * through, 246.4, 246.8, 246.9 against 286.4, 286.4, 286.5; held until
 * every head was out, 245.2, 243.3 against 283.4, 283.3; the heads polled
 * as one 64-bit mask by one lane (32 lanes had polled 32 counters), 243.6,
 * 246.5, 244.5 against 280.7, 280.8, 280.9; the 32k context 114.2-113.3
 * against 114.6, 113.5. In the timelines the blocks were through ~15 us
 * after the last head was out (the heads' flips done by 10 us; with the
 * flips and the polls as atomics, the same), and the attention's q came in
 * 3.5-3.7 us after the pass (2.4-2.9 in other builds). With the x
 * segments of all heads out copied together (cp.async; the branch's head
 * a64f94d, a later call): 239.8, 238.0 held and 240.2, 237.8 freed against
 * 283.3, 282.6, so x's loads were not the cause (warp 0 had its first
 * segment's x 1.4 us after o's start, and was through 17 us after the
 * last head was out); the same kernel with by-head never taken at run
 * time, 282.8, 282.6, its q in 2.6 us after the pass: neither the heads'
 * flips nor the code slow the attention, the by-head o running beside it
 * does. Dropped.
 *
 * Rejected (H200, 2026-12-01, bench/results/2026-12-01-h200-pstep-idle-
 * prefetch.jsonl, one call, branch wip/idle-prefetch): the blocks without
 * an attention item (4 of 132 at 4 splits a head) bulk-prefetching into
 * L2, once past the wait before the attention, the o projection's bytes
 * beyond every block's ring (7.4 MB): 249.1, 249.8 against 281.9, 281.4;
 * with each block's first 2 gate/up pieces a run as well (8.4 MB more),
 * 191.7, 191.0; the same over 36 idle blocks (3 splits a head), 277.2,
 * 277.0. The cost falls with the bytes a block issues (~15 us a layer
 * for 1.85 MB a block), which points (no timeline taken) at the
 * prefetching blocks' own arrival after the attention, its release fence
 * waiting behind their prefetches, holding everyone at the barrier: the
 * fence of "Landed later" above. Prefetching only after their own arrival
 * (at the o GEMV's start; bench/results/2026-12-01-h200-pstep-relay.jsonl,
 * one call, two rounds): 4 idle blocks, o's bytes beyond the rings, 256.0,
 * 254.8 against 283.0, 282.5; 36 idle blocks (3 splits a head) with o's
 * and the first 2 gate/up pieces a run, 281.5, 281.1; o's only, 283.0,
 * 282.9; 3 splits without prefetch, 282.2, 282.7 (test_cuda_pstep 40/40
 * for the 36-block form). Its timeline: o's first two tenths still 0.6
 * and 2.5 TB/s. Rejected.
 *
 * What the barrier's release fence costs now (same file, one call, three
 * rounds; measurement only, not correct by the memory model): every
 * arrival relaxed, 287.2, 287.8, 287.1 against 283.1, 281.8, 282.0 (+1.8%).
 * Rejected (same file, three calls, branch wip/sentinel): a publication
 * without the fence, "relay buffers". Every GEMV output that later ops of
 * the step read (qkv, the residual after o and after down, the SwiGLU
 * product: 128 a step for Llama-2-7B) goes to a buffer of its own, one of
 * two halves by the step's parity, each element all ones until its writer
 * stores it (and clears the other half's for the next step); readers load
 * with relaxed loads of the element's size until no element is all ones,
 * and the GEMVs' arrivals are relaxed. Correct (test_cuda_pstep 40/40,
 * test_cuda_model 94/94) but slower: 277.7, 278.0 against 285.1, 286.7,
 * and with the relay buffers off in the same kernel 277.3, 277.1: the
 * relaxed arrivals gained 0.2% of the 1.8%, and the kernel itself lost
 * 2.8%. Not from x's loads: 8 or 16 bytes a load, relaxed or .cg, 276.1 -
 * 277.9 against main's 283.4, 283.8 (next call); nor from the attention's
 * relay loads (1.3k of the 3.4k SASS instructions the kernel grew by; the
 * GEMV loop's code is the same): compiled out, 279.4 against 278.5 and
 * main's 287.0 (a third call). Not found: the rest (the norm op out of
 * line, which kept the kernel from spilling; the relay offsets live
 * through every op; the epilogue's branches).
 *
 * Landed later (H200, 2026-12-01, bench/results/2026-12-01-h200-overlap.
 * jsonl; libraries swapped in each call): with the engine keeping a lone
 * sequence's next step queued (overlap, engine.c) the host no longer adds
 * to a token: 288.4, 288.2, 288.2 tok/s against 287.2, 285.5, 286.7. Then a
 * greedy step's argmax drawn here, the lm head's epilogue ranking its rows
 * (an atomic max of ck_logit_key) and the last block out emitting the token
 * and the next step's metadata (ck_chain), so no sampling kernel runs, and
 * the counters zeroed by that block instead of a memset before each launch:
 * 288.7, 288.9, 288.5 against 288.2, 288.1, 288.2. The final norm taken by
 * the lm head (a one-row gather is the row itself: two barriers and a
 * one-block norm op less): 289.4, 289.6, 289.1 against 289.2, 289.3, 288.9.
 * Rejected: each step launched as a programmatic dependent of the one
 * before (eager launches; its producers streaming before griddepcontrol.
 * wait while the step before finished): 285.2, 285.3, 285.2 against 285.3,
 * 285.3, 285.2 replaying graphs, in a call whose machine ran ~1.4% slower.
 *
 * Rejected (H200, 2026-12-01, bench/results/2026-12-01-h200-x-loads.jsonl,
 * four calls, libraries swapped in each; tok/s against main in the same
 * call): what a GEMV loads after the barrier before it costs more than its
 * bytes. The attention's split merge moved into the o GEMV's x load (each
 * split leaves its partial, no split counter; every block merges the four
 * splits of every head as it loads x: 64 KB of partials a block), 278.5
 * against 285.4; one group of 8 elements a thread at a time (no spills),
 * 281.5 (correct: test_cuda_pstep 60/60). The norm's x and w loaded 16
 * bytes a load rather than 4, 286.9 against 288.7; w with an L2 evict_last
 * hint, 284.6 against 285.7; and the next norm's w bulk-prefetched into L2
 * a GEMV ahead, 285.9. With no w loads at all (measurement only, wrong
 * results) 287.5 against 285.7, 290.8 on the 16-byte form: so the op that
 * writes the residual row (the embedding, o, down) wrote x * w of the next
 * norm and its block's sum of squares (thread 0, before the arrival), and
 * the GEMV taking the norm loaded that row and the 132 sums instead of x
 * and w: correct (test_cuda_pstep 60/60, test_cuda_model 140/140, planner
 * sweep worst 0.08%) but 282.1 against 285.3 (4 bytes spilled).
 *
 * Landed later (H200, 2026-12-01, bench/results/2026-12-01-h200-norm-
 * fold.jsonl and ...-llama2-7b-norm-fold-check.jsonl, four calls): for
 * bf16, each norm's weight folded into the columns of the matrix after it
 * at load (qkv, gate/up, an untied lm head; cuda_backend.c's fold_norm), so
 * that a step whose norms are all folded runs a form of this kernel that
 * loads no norm weights (kFolded): 290.4, 290.4, 290.1 tok/s against
 * 288.7, 288.4, 288.4 for the commit before (and 288.7, 288.6, 288.8 for
 * this build with the fold off) in one call; 287.1, 287.6, 287.0 against
 * 285.4 with the fold off in another, and 287.4, 287.6, 287.4 in a third
 * (the machines lent differ by ~1.3%). test_cuda_pstep 60/60,
 * test_backend_ops 1250/1250, test_cuda_model 180/180 (the fixtures'
 * logits and perplexity against transformers, bf16 folded and not). First
 * tried as a branch on a NULL w in one kernel: 287.1, 287.2 folded, 283.0,
 * 283.1 not, against 285.2, 285.1 for the commit before: the branch alone
 * cost 0.7%. Rejected (same file, one call): the folded form's norm
 * deferred, x stored unscaled and each warp's sum of squares published by
 * the sync after it, the GEMV's row sums scaled in its epilogue (two block
 * syncs and the reduction's latency off the path before the GEMV; correct,
 * test_cuda_pstep 60/60): 282.6, 282.5, 282.3 against 287.4, 287.6, 287.4.
 *
 * Landed later (H200, 2026-12-02, bench/results/2026-12-02-h200-pstep-
 * merge.jsonl, four calls, libraries swapped, rounds interleaved): a head's
 * splits merged without an atomic (split_merge: the last split polls the
 * others' partials, each word tagged with its split's L, and clears them):
 * 293.1, 293.0 tok/s against 290.7, 291.0 for the commit before in one
 * call, 289.6, 289.8, 289.7 against 287.1, 287.0, 287.4 on a slower
 * machine in the next (test_cuda_pstep 60/60, test_backend_ops 1396/1396,
 * test_cuda_model 180/180); 293.1, 293.0, and 293.0 (f16 291.1, the 32k
 * context 114.4) in a fourth. The split counter's acq_rel atomic had a
 * release (behind the block's weight copies in flight) and the last
 * split's loads one round trip after it. Rejected:
 * the barrier polled with 4 loads in flight, issued 100 or 200 ns apart
 * (a pass seen sooner after the last arrival), 283.7, 283.4 and 283.4,
 * 283.0; 8 in flight, 272.8, 273.2, against 290.7, 290.9: the polls delay
 * the arrivals at the counter's L2 slice. Fewer polls while many blocks
 * are out (a sleep of 8, 16 or 32 ns a missing arrival, at most 2 us):
 * 291.1, 290.9; 290.7, 290.9; 290.4, 290.2: no gain. In the fourth call,
 * one build with the attention's next round of K loads issued right after
 * the round's dot products (its V after the V weighting, rather than both
 * at the round's end) and the chain's loads (ck_chain_emit) issued before
 * the step's last fence: 289.9, 289.8 against 293.1, 293.0: rejected.
 *
 * Its timeline (bench/results/2026-12-02-h200-pstep-timeline.jsonl; a
 * -DHR_PSTEP_TIMELINE=ON build, graphs off: a step 3681 us at context
 * 228, 3737 at 348): the attention from the first pass before it to the
 * last pass after it 6.2 us (q in 2.2 us after the pass, warp 0's keys
 * 2.9, the split out 3.7, the arrival 3.9), 7.5 us at 348 positions,
 * where a second round of keys takes 1.3 us more; the o GEMV after it
 * lands nothing GPU-wide in the first three tenths of its 10.2 us (its
 * ring was full when the attention began, and its first refill lands 5.1
 * us after the pass); at a GEMV's barrier the last arrival to the pass
 * 2.1 us, of it the release fence 1.24 us. So HBM idles ~9 us a layer
 * around the attention: still the largest loss. (The fourth call's
 * rejected build above bundled the earlier next-round loads with the
 * chain's; measured apart below.)
 *
 * Rejected (H200, 2026-12-02, bench/results/2026-12-02-h200-pstep-attn-
 * inflight.jsonl, five calls, libraries swapped, rounds interleaved; tok/s
 * against this kernel in the same call). The two parts of that build
 * apart: the next round's loads issued early, 286.7, 286.7 against 289.9,
 * 289.8; the chain's loads before the last fence, 289.8, 289.9 (no gain).
 * The attention's next round copied into shared memory (cp.async, a
 * lane's own 8 bytes of K and V a key, at x and acc) one round ahead of
 * the round in registers: 289.9, 290.0 against 289.9, 289.8 at 128..384
 * positions, and slower where there are more rounds: 240.3, 240.3 against
 * 246.1, 245.9 from a 2048-token prompt, 214.2 against 219.9 from 3584.
 * More copies in flight while the consumers have many of their op's
 * pieces left (so they land long before the arrival's fence): 3 while 5
 * or more are left, 288.4, 288.0; 4 while 6, 287.8, 287.7; 4 while 8,
 * 288.7, 288.9; 3 while 8, 288.9, 289.0, against 293.0, 293.3: more in
 * flight slows the step even where no fence waits for it. The weights
 * copied with an evict_normal L2 policy instead of evict_first: 283.8,
 * 283.7 against 289.4, 289.6 (probably the K/V rows and activations
 * leaving L2 under the weights; not measured). A run of segments across a
 * row boundary with all 8 loads first and the next row summed apart (two
 * accumulators; the same sums), with a GEMV's x loads zero-filled past K
 * (so that no x register is carried from one GEMV to the next, which
 * let that form fit without spills): 292.0, 291.8 against 292.9, 292.8
 * (test_cuda_pstep 60/60); every run taken that way (one path, no
 * separate usual case): 241.5, 240.5.
 *
 * Landed later (H200, 2026-12-02, bench/results/2026-12-02-h200-row-
 * flags.jsonl, two calls, libraries swapped, rounds interleaved): the
 * x loads zero-filled alone (the part of the rejected build above that
 * carries no x register between GEMVs): 292.9, 293.0, 293.1 against 292.9,
 * 292.9, 292.8, then 293.3, 293.3, 293.2 against 293.2, 293.1, 293.0: six
 * pairs of six faster, by 0.05% on average. Rejected in the second call:
 * an attention item waiting only for the blocks that hold its head's q, k
 * and v rows (each block, once its qkv rows are out, publishing the op's
 * index in a word of its own, one release fence for that and its barrier
 * arrival; lanes of warp 0 polling the 2-9 blocks an item needs), not for
 * the grid: correct (test_cuda_pstep 60/60, test_backend_ops 1396/1396)
 * and 286.8, 286.7, 286.6 against 293.2, 293.1, 293.0; 244.6 against
 * 248.2 from a 2048-token prompt. As with the o projection started by
 * head: an attention that begins while other blocks still stream their
 * GEMV costs more than the barrier it saves (branch wip/row-flags).
 * The machines lent differ, and not in their copy bandwidth: this kernel
 * ran 288.5 tok/s on one that copies at 4.27 TB/s (bench's copy
 * bandwidth) and 293.1 on ones that copy at 4.24. A timeline on a faster
 * one (bench/results/2026-12-02-h200-pstep-timeline-fast.jsonl; a step
 * 3624 us against 3681 in the one above, most likely on a slower machine)
 * has the attention and barriers the same within 0.2 us and the GEMV
 * bodies 1-2% faster: their HBM streams reads faster (README).
 *
 * Landed later (H200, 2026-12-02, bench/results/2026-12-02-h200-kv-ring-
 * page-ahead.jsonl, four calls, libraries swapped, rounds interleaved):
 * the attention's pages loaded a round ahead (lane u holds the page of
 * the next round's key u, loaded beside this round's rows), so that a
 * round's K and V loads wait for no block-table load before them: 247.8
 * against 245.1 tok/s from a 2048-token prompt, 288.5, 288.6 against
 * 288.6, 288.6 from 128 tokens, 114.3 against 114.2 at 32k (test_cuda_
 * pstep 60/60, test_cuda_model 183/183).
 * Rejected (branch wip/kv-ring): the first round of each block's item
 * (64 keys of K and V) copied into a ring stage by the producer while the
 * qkv GEMV streams, so that after the barrier the attention waits only
 * for q. Its timeline (a faster machine): q in 1.0 us after the pass
 * (2.2 in the timelines before), the arrival 3.1 (3.9), a step at 228 positions 3585
 * us (3624); but the stage's refill in flight made the attention's
 * release fence take 1.7 us (0.4), 1.5 with the refill held until that
 * arrival: 291.8, 292.0 against 293.1, 293.1 tok/s. From a 2048-token
 * prompt 221.3 against 248.4: its later rounds took 3.4 us each, most
 * likely because, without the first round's block-table loads before
 * the wait, the table's lines were not in L1 and each round waited for a
 * table load and then for its rows. With the pages a round ahead: 288.3,
 * 288.3 against 288.6, 288.6, and 245.7 against 245.1 (test_cuda_pstep
 * 60/60): no gain over the pages alone. In its timeline the attention
 * took 6.9 us from the first pass to the last against 6.4, its items'
 * arrivals 1 us sooner after their own pass: some blocks passed late,
 * most likely waiting for the ring's copy of the round (from HBM: the L2
 * prefetch left those rows out). With them prefetched as well: 289.3,
 * 289.2 against 289.6, 289.8 for the pages alone (a fifth call).
 *
 * Rejected (H200, 2026-12-02, bench/results/2026-12-02-h200-fused-mlp.
 * jsonl, four calls, branch wip/fused-mlp): the MLP as one op. The down
 * GEMV neither waiting at the barrier after gate/up nor loading its x
 * (measurement only, wrong results) ran 301.6, 301.7 tok/s against 293.5,
 * 293.2: that barrier and x load cost 2.8%. Built for real: a block keeps
 * its h rows [a, b) in shared memory and multiplies them into its columns
 * [a, b) of the down matrix, fetched as boxes of 104 columns x 157 rows
 * (TMA, a tensor map per layer; the box starts at a rounded down to 8),
 * each thread a row of a box, the partial rows added into the residual's
 * pending sums as fixed-point 64-bit atomics (so the same step gives the
 * same bits), which the next norm and the o GEMV's residual add take in.
 * Correct (test_cuda_pstep 60/60, test_cuda_model 183/183) but 275.0,
 * 274.8 against 293.4, 293.0; the blocks starting at boxes of their own
 * (the atomics spread over the rows) 271.9, 271.5 against 291.7, 291.8,
 * without the atomics (measurement only) 274.0, 273.9; 8 accumulators a
 * row 271.1, 270.6, and no arithmetic nor atomics at all 273.0, against
 * 289.8 (a third machine). So the column boxes' fetch is the cost (rows
 * of 208 bytes 22 KB apart), not the sums; with the fused code present
 * but not taken (HEADROOM_CUDA_FUSE_MLP=0) 290.3 against 293.0-293.4
 * (155 registers against 142). With the down matrix transposed (a copy
 * made at the first step, outside the plan; branch wip/fused-mlp-t, each
 * block's rows of it one contiguous run through the ring, 16 output
 * columns a thread; bench/results/2026-12-02-h200-step-edges.jsonl):
 * correct (test_cuda_pstep 60/60) and slower still, 256.9, 257.0, 257.0
 * against 289.8, 289.7, 289.8. Whatever the fetch, a fused MLP exchanges
 * every block's 4096 partial sums a layer (132 x 4096 atomics, ~50 times
 * the bytes of the down GEMV's x load) where the two-op form exchanges h
 * once. Dropped.
 *
 * The step's edges (same file, three calls, libraries swapped, rounds
 * interleaved). The whole step run twice a launch (measurement only: one
 * token a launch; branch wip/step-edges): 146.39, 146.41, 146.39 tok/s
 * against 292.36, 292.40, 292.30 for the same build run once, so a launch
 * boundary (the lm head's tail, the last block's emit, the kernel's exit
 * and the next one's start with its ring empty) costs 10.3 us a step
 * (0.3%): several steps a launch would take most of it back, but the loop
 * over passes alone cost 0.2% (292.35 against 292.86-293.17 for main).
 * Built on branch wip/multi-step (8895a4e): a greedy chained step runs up
 * to 8 steps a launch (each step's embedding draws the token from the
 * step before's rank, two rank slots alternating; block 0 advances the
 * chain's metadata, which the attention then reads through L2), and the
 * engine hands out a chain's tokens one an engine step (test_engine_
 * overlap checks that on the CPU through a stand-in). Its one device
 * call (same file): one step a launch from that build 288.86 against
 * 289.84, 289.84 for main (-0.34%: the restructured kernel, 144 registers
 * against 142, costs more than a chain of 8 could take back, ~0.26%,
 * unless the chain is a kernel form of its own); the chains themselves
 * were refused by a host check that replayed graphs cannot pass. Both
 * mended on the branch (6a4635b: the chain a kernel form of its own, the
 * one-step form with main's register counts; bench/results/2026-12-02-
 * h200-chains-l2-pin.jsonl, one call, three rounds): chains of 8 293.46,
 * 293.27, 293.10 tok/s, the same build one step a launch 293.20, 293.02,
 * 292.98, main 293.18, 293.39, 293.00 (test_cuda_pstep 60/60, the greedy
 * chains included; test_cuda_model 183/183). +0.03%, inside the noise: a
 * chain's step pays back in its loop what the boundary saved, and streams
 * would come in bursts of 8 tokens. Not landed.
 * The embedding written whole by every block, which then reads its own x,
 * so that no barrier follows it: 291.89, 291.96, 291.83 against 292.35
 * (correct, test_cuda_pstep 60/60): 132 blocks writing the same 16 KB
 * cost more than the barrier. Each block, once out of the step,
 * bulk-prefetching into L2 the first 2, 4 or 6 pieces of its qkv rows,
 * which the next launch copies first (branch wip/next-step-l2), three
 * rounds' means: 289.69, 289.71, 289.52 against 289.83 for main (a slower
 * machine): no gain.
 *
 * Rejected (same file as the chains, one call): weights kept in L2 from
 * one step to the next, so that a step reads fewer bytes from HBM (branch
 * wip/l2-pin; L2 is 60 MB, of which the driver lets 37.5 be set aside for
 * persisting lines). One 32 KB piece of each block's share of the first
 * 4, 6, 8 or 10 gate/up GEMVs copied with an evict_last policy (17-43 MB)
 * and the set-aside at its most: 253.7, 253.5, 253.2, 252.7 tok/s against
 * 292.9 for the build with nothing pinned; the set-aside costs 13.6%
 * whatever is pinned (the K/V rows and activations lose that part of L2,
 * most likely). evict_last without a set-aside: 292.73, 292.88 against
 * 292.94, 292.77: no gain.
 *
 * Landed later (H200, 2026-12-02, bench/results/2026-12-02-h200-pstep-no-
 * division.jsonl, one call on a machine of the slower kind, read 4.48
 * TB/s, libraries swapped, three rounds): no integer division a piece.
 * The producer and each GEMV's consumers had computed a piece's stage
 * and parity as piece % n_stages and piece / n_stages, the consumers a
 * run's row and column as a division by the row's segments (n_stages and
 * K are run-time values: ~20 instructions each), and the producer kept
 * its holds in an array indexed by stage (local memory, a load and a
 * store between a freed stage and its refill). Now stage, parity, row and
 * column are carried from piece to piece, the holds are 10-bit fields of
 * one register (CK_PSTEP_MAX_OPS), and the stage's expect_tx is issued
 * before the wait for the copy kInFlight back (so that once that copy
 * lands only the next copy's issue is left): 292.46, 292.63, 292.51 tok/s
 * against 289.92, 289.75, 289.73 (+0.94%); the producer part alone 291.10,
 * 291.06, 290.99, the consumers' alone 291.63, 291.67, 291.62; the 32k
 * context 114.19 against 114.21 (test_cuda_pstep 60/60, test_cuda_model
 * 183/183); on a faster machine (read 4.57 TB/s, a later call) 296.60,
 * 296.61 against 292.74, 292.83, f16 295.21 against 291.16. Registers at
 * head size 128: bf16 144/144 (142 before), f16 140; no spills. A few
 * instructions a piece show: the producer reacts to a landing or a freed
 * stage within a piece's ~1 us, and the consumers race the ring at each
 * GEMV's start.
 *
 * Where a token's 4078 us go (one call, each part left out in turn, the
 * results then wrong: measurement only): the GEMVs' arithmetic 205 us,
 * their x loads and norms 228, the attention 371, the grid barriers 534;
 * with all of those out the ring alone streams the weights in 2901 us
 * (4.55 TB/s), 3264 with the barriers kept. So HBM idles whenever the
 * consumers of all blocks wait at once, which the barriers make them do:
 * the ring is what HBM needs in flight, with little to spare. (Measured
 * before the norm fold and the splits' merge above; with them 293 tok/s
 * on the faster of the machines lent, 289.7 on the slower, ~1.1% apart.)
 *
 * Each GEMV waits for its slowest block, and which blocks are slow does
 * not change: with every block's arrival at the barriers timed (one call,
 * 33024 GEMVs), the blocks on SMs 32-43, 78-87, 126 and 127 arrive ~3 us
 * before the other 108 (0.6-0.8 against ~3.6 us after the first arrival,
 * the same SMs in even and odd steps: correlation 1.000), the last 4.1 us
 * after the first on average. Giving the blocks on those SMs 8% or 15%
 * more rows than the others (one call, the SMs hard-coded, measurement
 * only) gave 249.1-250.4 tok/s against 250.3-250.7: no gain. Those
 * blocks' wait is not where the step's time goes; HBM is shared.
 *
 * Registers: 9 warps put 3 on some of an SM's 4 register files (16K each),
 * so a thread gets at most 168 (__launch_bounds__ gives that); a
 * __maxnreg__ of 208 or 224 made the kernel unlaunchable (ck_pstep_supported
 * now asks the occupancy API first). No kernel spills (-Xptxas -v): the
 * norm weights preloaded at a barrier took 12 bytes, a round's scores
 * together 24 more; without the preload, neither spills.
 *
 * Activations written inside the kernel are read with ld.global.cg (L2): L1
 * is not coherent between SMs, and a line of an earlier layer could be in it.
 */
#include "backend/cuda/common.cuh"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

namespace {

constexpr int kWarps = 8;                    /* consumer warps */
constexpr int kConsumers = kWarps * 32;
constexpr int kThreads = kConsumers + 32;    /* + the producer warp */
constexpr int kSeg = 512;                    /* a warp's bytes at a time: 32 lanes x 16 */
constexpr int kXBytes = CK_PSTEP_MAX_K * 2;  /* x of a GEMV, ck */
constexpr int kAccBytes = kWarps * CK_PSTEP_ROWS * 4;

/* the ring: n_stages (at most kMaxStages) pieces of kPiece bytes, as many
 * as shared memory holds beside x (the model's widest K) and acc */
constexpr int kPiece = 32768;
constexpr int kMaxStages = 6;
constexpr int kSegPerPiece = kPiece / kSeg;
constexpr int kSegPerWarp = kSegPerPiece / kWarps; /* a warp's run of a piece */
constexpr int kSmemMax = 227 * 1024;               /* a block's shared memory on an H100/H200 */
static_assert(kPiece % kSeg == 0 && kSegPerPiece % kWarps == 0, "whole runs of segments");
static_assert(kXBytes + kAccBytes + 5 * kPiece <= kSmemMax, "5 stages at the widest x");

/* At most kInFlight of a block's copies in flight (issued, not landed); the
 * rest of the ring holds landed pieces. Why (timelines, the header's
 * "Landed later"): the barrier's arrival after a GEMV waits behind the
 * copies the producer has issued: its release fence took 2.3-3.9 us with
 * up to 6 in flight, as long with the epilogue's stores left out, and 0.4
 * after the attention, when none are. Two in flight still keep HBM busy
 * (2 measured fastest of 1, 2, 3, 4 and 6; 3 or 4 only while the
 * consumers have many pieces left, slower too: the header's "Rejected"). */
constexpr int kInFlight = 2;

/* The refills of the stages that a GEMV's last kHold pieces free wait for
 * the block's arrival at the barrier after it: issued earlier, they are in
 * flight while the arrival's release fence runs, and it runs longer
 * (timelines: 1.45-1.59 us a GEMV barrier, 0.96-1.45 with 3 held; 0.4 after
 * the attention, when the ring is full). 3 held ran faster than 4 and 6
 * (header, "Landed later"). */
constexpr int kHold = 3;

/* The timeline of one step (a build with -DHR_PSTEP_TIMELINE=ON only; the
 * step and file from HEADROOM_CUDA_PSTEP_TIMELINE=step:file, graphs off;
 * tools/pstep_timeline.py reads it): every piece's copy issued, seen
 * landed (the producer polls while it waits), its consumption started and
 * released by warp 0; for every op the arrival at the barrier after it,
 * its pass, for a GEMV the moment thread 0 had stored its part of x, the
 * moment the arrival's release was done (its fence waits for the block's
 * earlier memory operations), and for an attention (thread 0, the block's
 * last item) q in and rotated, warp 0's keys done, the warps merged, the
 * split's partial out (the head's last split: merged and out); per
 * block, in %globaltimer ns: kTlPieces x 4 then kTlOps x kTlOpSlots values. */
#ifdef HR_PSTEP_TIMELINE
constexpr bool kTimeline = true;
#else
constexpr bool kTimeline = false;
#endif
constexpr int kTlPieces = 4096, kTlOps = 512;
constexpr int kTlOpSlots = 8;
constexpr int kTlStride = kTlPieces * 4 + kTlOps * kTlOpSlots;

__device__ __forceinline__ void mbar_arrive_expect(uint64_t *bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)),
                 "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void bulk_copy(void *dst, const void *src, unsigned bytes,
                                          uint64_t *bar, uint64_t policy) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
                 ".L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(smem_u32(dst)),
                 "l"(src), "r"(bytes), "r"(smem_u32(bar)), "l"(policy)
                 : "memory");
}

/* the consumer warps only (the producer never joins): named barrier 1 */
__device__ __forceinline__ void consumers_sync() {
    asm volatile("bar.sync 1, %0;" ::"n"(kConsumers) : "memory");
}

__device__ __forceinline__ uint64_t now_ns() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* The grid barrier, in two halves so that the block can issue loads that
 * need nothing of this op between them (pstep_kernel): every block's
 * consumers arrive, then thread 0 waits until all blocks have; the counter
 * only grows within a launch (target = barriers so far x blocks).
 * The arrival is a release reduction, not an atomic whose old value the
 * block would wait for: the last block to arrive learns that it was last
 * one L2 round trip sooner, from its first poll.
 * trace (diagnostics, may be NULL): [0] block 0 done with the op, [1] the
 * last block's arrival (a max over the blocks: the timer only grows, so it
 * needs no reset between steps), [2] block 0 past the barrier. */
__device__ __forceinline__ void grid_arrive(unsigned *count, uint64_t *trace, uint64_t *tl_op,
                                            volatile int *arrived, int op) {
    consumers_sync();
    if (threadIdx.x == 0) {
        if (kTimeline && tl_op)
            tl_op[0] = now_ns();
        if (trace && blockIdx.x == 0)
            trace[0] = now_ns();
        if (trace)
            atomicMax(reinterpret_cast<unsigned long long *>(trace + 1),
                      (unsigned long long)now_ns());
        asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(count) : "memory");
        *arrived = op + 1; /* the producer may refill the stages it held (kHold) */
        if (kTimeline && tl_op)
            tl_op[3] = now_ns();
    }
}

/* The barrier before an op: count null when there is none (the first op).
 * The program loop waits before each op; the attention waits itself, after
 * the loads that need no activation of the op before (its angles and
 * pages). */
struct barrier_wait {
    unsigned *count;
    unsigned target;
    uint64_t *trace, *tl_op;
};

__device__ __forceinline__ void grid_wait(const barrier_wait &w) {
    if (!w.count)
        return;
    if (threadIdx.x == 0) {
        unsigned seen;
        do {
            asm volatile("ld.acquire.gpu.global.u32 %0, [%1];"
                         : "=r"(seen)
                         : "l"(w.count)
                         : "memory");
            if (seen < w.target)
                __nanosleep(32); /* fewer polls in the way of the arrivals */
        } while (seen < w.target);
        if (w.trace && blockIdx.x == 0)
            w.trace[2] = now_ns();
        if (kTimeline && w.tl_op)
            w.tl_op[1] = now_ns();
    }
    consumers_sync();
}

/* v rounded to T (where the op-by-op path stores T), as f32 */
template <class T> __device__ __forceinline__ float round_to(float v) {
    T h;
    ck_from_f32(&h, v);
    return ck_to_f32(h);
}

/* the block's rows of an N-row matrix */
__device__ __forceinline__ int2 block_rows(int N) {
    return make_int2((int)((int64_t)N * blockIdx.x / gridDim.x),
                     (int)((int64_t)N * (blockIdx.x + 1) / gridDim.x));
}

/* timeline: the pieces seen landed so far, in order, stamped. A stage's
 * parity names its piece only until the stage is reused: before piece
 * `issued` reuses one, every piece before issued - n_stages + 1 has landed
 * (its stage came back empty) and is stamped now if it was not seen. */
__device__ __forceinline__ void tl_lands(uint64_t *tl, uint64_t *full, int n_stages, int issued,
                                         int &landed) {
    while (landed < issued &&
           (landed <= issued - n_stages ||
            mbar_test(&full[landed % n_stages], (unsigned)(landed / n_stages) & 1u))) {
        if (landed < kTlPieces)
            tl[landed * 4 + 1] = now_ns();
        landed++;
    }
}

/* ---- the producer: every GEMV's share of this block, in program order */
__device__ void produce(const ck_pstep_op *prog, int n_op, uint8_t *ring, int n_stages,
                        uint64_t *full, uint64_t *empty, uint64_t *tl,
                        const volatile int *arrived) {
    /* hold: kHoldBits a stage, the refill of stage st waits until *arrived >=
     * its field (0: it need not), i.e. for the arrival after the GEMV that
     * used it last (n_op <= CK_PSTEP_MAX_OPS). Bit fields rather than
     * an array: a stage-indexed array lives in local memory, a load and a
     * store of it between a freed stage and its refill. */
    constexpr int kHoldBits = 10;
    constexpr uint64_t kHoldMask = (1u << kHoldBits) - 1;
    static_assert(kMaxStages * kHoldBits <= 64 && CK_PSTEP_MAX_OPS <= kHoldMask,
                  "a stage's hold in its bits");
    uint64_t hold = 0;
    /* weights are read once a step: let them leave L2 first (evict_normal
     * measured 2% slower: the header's "Rejected") */
    uint64_t policy;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
    int piece = 0, landed = 0;
    /* piece's stage and the parity of its use of it, kept as the pieces go
     * (no division a piece): the stage's fill number is piece / n_stages */
    int st = 0;
    unsigned phase = 0;
    for (int i = 0; i < n_op; i++) {
        if (prog[i].kind != CKP_GEMV)
            continue;
        const ck_pstep_gemv &g = prog[i].gemv;
        const int2 rows = block_rows(g.pair ? g.pair : g.N);
        const int64_t bytes = (int64_t)(rows.y - rows.x) * g.K * 2;
        const int n_pieces = (g.pair ? 2 : 1) * (int)((bytes + kPiece - 1) / kPiece);
        const int last_piece = piece + n_pieces - 1;
        for (int run = 0; run < (g.pair ? 2 : 1); run++) { /* paired: gate rows, then up */
            const uint8_t *src = static_cast<const uint8_t *>(g.W) +
                                 ((int64_t)run * g.pair + rows.x) * g.K * 2;
            for (int64_t off = 0; off < bytes; off += kPiece, piece++) {
                const int shift = st * kHoldBits;
                if (piece >= n_stages) { /* its previous piece consumed by all warps */
                    if (kTimeline && tl)
                        while (!mbar_test(&empty[st], phase ^ 1u))
                            tl_lands(tl, full, n_stages, piece, landed);
                    else
                        mbar_wait(&empty[st], phase ^ 1u);
                    const int until = (int)((hold >> shift) & kHoldMask);
                    while (*arrived < until)
                        if (kTimeline && tl)
                            tl_lands(tl, full, n_stages, piece, landed);
                }
                /* the op's last pieces; at most n_stages, so that no refill
                 * waits for the end of the op it belongs to */
                const uint64_t mark = piece > last_piece - min(kHold, n_stages) ? i + 1 : 0;
                hold = (hold & ~(kHoldMask << shift)) | mark << shift;
                const unsigned len = (unsigned)min((int64_t)kPiece, bytes - off);
                /* the stage's next phase needs the copy's bytes: expecting
                 * them now takes the arrival off the path from the landing
                 * waited for below to the copy */
                mbar_arrive_expect(&full[st], len);
                if (piece >= kInFlight) { /* the copy kInFlight back has landed */
                    const int q = st >= kInFlight ? st - kInFlight : st - kInFlight + n_stages;
                    mbar_wait(&full[q], st >= kInFlight ? phase : phase ^ 1u);
                }
                if (kTimeline && tl) {
                    tl_lands(tl, full, n_stages, piece, landed);
                    if (piece < kTlPieces)
                        tl[piece * 4] = now_ns();
                }
                bulk_copy(ring + st * kPiece, src + off, len, &full[st], policy);
                if (++st == n_stages) {
                    st = 0;
                    phase ^= 1u;
                }
            }
        }
    }
    if (kTimeline && tl)
        while (landed < piece)
            tl_lands(tl, full, n_stages, piece, landed);
}

/* ---- the consumers' ops */

/* sum over the consumer threads; scratch: kWarps floats */
__device__ __forceinline__ float consumers_sum(float v, float *scratch) {
    v = warp_sum(v);
    consumers_sync();
    if ((threadIdx.x & 31) == 0)
        scratch[threadIdx.x >> 5] = v;
    consumers_sync();
    float t = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; w++)
        t += scratch[w];
    return t;
}

/* y (D, ck) = w * (x * scale), scale = 1 / rms(x) (+ eps), as
 * ck_add_rmsnorm; every consumer thread of the block takes part, loads of a
 * chunk of kNormPer elements a thread before its stores. kFolded: every
 * norm of the step has its weight folded into the matrix after it (w is
 * all ones), so y = x * scale and w is not loaded. A kernel of its own
 * rather than a branch: a branch on w cost 0.7% (header). */
constexpr int kNormPer = 8;

template <class T, bool kFolded>
__device__ __forceinline__ void norm_into(const float *x, const float *w, float eps, int D,
                                          T *y, float *scratch) {
    constexpr int kRegs = 2 * kNormPer;
    if (D <= kRegs * kConsumers) {
        /* x and w loaded once, together: one L2 round trip, not two */
        float v[kRegs], wv[kRegs], ss = 0.0f;
#pragma unroll
        for (int j = 0; j < kRegs; j++) {
            const int d = threadIdx.x + j * kConsumers;
            v[j] = d < D ? __ldcg(x + d) : 0.0f;
            if constexpr (!kFolded)
                wv[j] = d < D ? w[d] : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < kRegs; j++)
            ss += v[j] * v[j];
        const float scale = rsqrtf(consumers_sum(ss, scratch) / (float)D + eps);
#pragma unroll
        for (int j = 0; j < kRegs; j++) {
            const int d = threadIdx.x + j * kConsumers;
            if (d < D)
                ck_from_f32(y + d, kFolded ? v[j] * scale : wv[j] * (v[j] * scale));
        }
        return;
    }
    float ss = 0.0f;
    for (int d0 = 0; d0 < D; d0 += kNormPer * kConsumers) {
        float v[kNormPer];
#pragma unroll
        for (int j = 0; j < kNormPer; j++) {
            const int d = d0 + threadIdx.x + j * kConsumers;
            v[j] = d < D ? __ldcg(x + d) : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < kNormPer; j++)
            ss += v[j] * v[j];
    }
    const float scale = rsqrtf(consumers_sum(ss, scratch) / (float)D + eps);
    for (int d0 = 0; d0 < D; d0 += kNormPer * kConsumers) {
        float v[kNormPer], wv[kNormPer];
#pragma unroll
        for (int j = 0; j < kNormPer; j++) {
            const int d = d0 + threadIdx.x + j * kConsumers;
            v[j] = d < D ? __ldcg(x + d) : 0.0f;
            if constexpr (!kFolded)
                wv[j] = d < D ? w[d] : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < kNormPer; j++) {
            const int d = d0 + threadIdx.x + j * kConsumers;
            if (d < D)
                ck_from_f32(y + d, kFolded ? v[j] * scale : wv[j] * (v[j] * scale));
        }
    }
}

/* A warp's dot product of a 512-byte segment of W with the matching x on
 * the tensor cores: lane L holds elements 8L .. 8L + 7 of each (one uint4).
 * Read as fragments of mma.m16n8k16, the w words are a 16 x 16 A whose row
 * r (r < 8) holds the w elements of lanes 4r .. 4r + 3 that go in words 0
 * and 2, row r + 8 those of words 1 and 3; with B's column n made of the x
 * words that match A's row n (words 0 and 2 of lane 4n + t: B1) or row n +
 * 8 (words 1 and 3: B2), the diagonals C1[n][n] and C2[n + 8][n] hold the
 * segment's products summed in 32 groups, all of them once. The rest of
 * C is cross terms, never read. Two mma a segment replace 8 FMAs and 16
 * conversions a lane. c: C1 then C2 (f32, accumulated over a row). */
template <class T> __device__ __forceinline__ void seg_dot(uint4 w, uint4 x, float c[8]) {
    const uint32_t a[4] = {w.x, w.y, w.z, w.w};
    ck_pair<T>::mma(c, a, x.x, x.z);     /* C1: A rows 0..7 */
    ck_pair<T>::mma(c + 4, a, x.y, x.w); /* C2: A rows 8..15 */
}

/* this lane's share of the diagonals: lane 4n + n/2 holds C1[n][n] (c0 for
 * even n, c1 for odd) and C2[n + 8][n] (c2 or c3) */
__device__ __forceinline__ float seg_diag(const float c[8], int lane) {
    const int n = lane >> 2;
    if ((lane & 3) != n >> 1)
        return 0.0f;
    return n & 1 ? c[1] + c[7] : c[0] + c[6];
}

/* A warp's running sum (c) belongs to row `cur` (-1: none yet). For another
 * row, the sum goes to the warp's slot of cur and a new sum starts. */
__device__ __forceinline__ void start_row(int row, int &cur, float c[8], float *my_acc,
                                          int lane) {
    if (row == cur)
        return;
    const float v = warp_sum(seg_diag(c, lane));
    if (cur >= 0 && lane == 0)
        my_acc[cur] = v;
    cur = row;
#pragma unroll
    for (int e = 0; e < 8; e++)
        c[e] = 0.0f;
}

/* A greedy step's logits rows (f32, no residual) written and ranked: the
 * block's largest ck_logit_key into *rank (an atomic max over the blocks).
 * Every consumer thread; v is meaningful for tid < n_run. */
__device__ __noinline__ void rank_rows(float *y, int row0, int id0, int n_run, float v,
                                       unsigned long long *rank) {
    __shared__ unsigned long long warp_key[kWarps];
    const int tid = threadIdx.x, lane = tid & 31;
    unsigned long long key = 0;
    if (tid < n_run) {
        y[row0 + tid] = v;
        key = ck_logit_key(ck_logit_canon(v), id0 + row0 + tid);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const unsigned long long k = __shfl_xor_sync(0xffffffffu, key, o);
        key = k > key ? k : key;
    }
    if (lane == 0)
        warp_key[tid >> 5] = key;
    consumers_sync();
    if (tid == 0) {
        for (int w = 1; w < kWarps; w++)
            key = warp_key[w] > key ? warp_key[w] : key;
        atomicMax(rank, key);
    }
}

template <class T, bool kFolded>
__device__ __forceinline__ void gemv_op(const ck_pstep_op &op, const uint8_t *ring, int n_stages,
                                        uint16_t *xs, float *acc, uint64_t *full, uint64_t *empty,
                                        int &piece, float *scratch, uint64_t *tl,
                                        uint64_t *tl_op, unsigned long long *rank) {
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int K = op.gemv.K, pair = op.gemv.pair, n_runs = pair ? 2 : 1;
    const int2 rows = block_rows(pair ? pair : op.gemv.N);
    const int n_run = rows.y - rows.x; /* rows of a run; local rows run * n_run + r */
    const int n_rows = n_runs * n_run;
    /* what the epilogue adds, loaded now, beside x: a thread's row (pair:
     * gate row tid and up row tid) */
    static_assert(CK_PSTEP_ROWS <= kConsumers, "a row a thread in the epilogue");
    float bias0 = 0.0f, bias1 = 0.0f, resid0 = 0.0f;
    if (tid < n_run) {
        if (op.gemv.bias) {
            bias0 = op.gemv.bias[rows.x + tid];
            if (pair)
                bias1 = op.gemv.bias[pair + rows.x + tid];
        }
        if (op.gemv.resid)
            resid0 = __ldcg(op.gemv.resid + rows.x + tid);
    }
    if (op.gemv.norm_x) {
        norm_into<T, kFolded>(op.gemv.norm_x, op.gemv.norm_w, op.gemv.eps, K,
                              reinterpret_cast<T *>(xs), scratch);
        /* each thread copies the elements it wrote (norm_into's order) */
        if (op.gemv.norm_y && blockIdx.x == 0)
            for (int d = tid; d < K; d += kConsumers)
                static_cast<uint16_t *>(op.gemv.norm_y)[d] = xs[d];
    } else {
        /* x into shared memory, every load issued before the first store (a
         * plain loop waits out an L2 round trip per element: the compiler
         * cannot tell the stores from the loads); the loads past K are
         * zeros, so no x register lives on into the next GEMV (0.05%
         * faster, header) */
        const uint4 *x4 = static_cast<const uint4 *>(op.gemv.x);
        constexpr int kXLoads = CK_PSTEP_MAX_K / 8 / kConsumers;
        uint4 xv[kXLoads];
#pragma unroll
        for (int j = 0; j < kXLoads; j++)
            xv[j] = tid + j * kConsumers < K / 8 ? __ldcg(x4 + tid + j * kConsumers)
                                                 : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int j = 0; j < kXLoads; j++)
            if (tid + j * kConsumers < K / 8)
                reinterpret_cast<uint4 *>(xs)[tid + j * kConsumers] = xv[j];
    }
    if (kTimeline && tl_op && tid == 0)
        tl_op[2] = now_ns();
    for (int i = tid; i < kWarps * n_rows; i += kConsumers)
        acc[i] = 0.0f;
    consumers_sync();

    const int seg_per_row = K * 2 / kSeg;
    const uint4 *xs4 = reinterpret_cast<const uint4 *>(xs);
    float *my_acc = acc + warp * n_rows;
    int cur = -1; /* the row of this warp's running sum */
    float part[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    const int64_t bytes = (int64_t)n_run * K * 2;
    const int s0 = warp * kSegPerWarp; /* this warp's run of a piece */
    /* the stage, its parity and the run's first row and column, kept as
     * the pieces go (no division a piece; a piece is kSegPerPiece
     * segments further on) */
    int st = piece % n_stages;
    unsigned phase = (unsigned)(piece / n_stages) & 1u;
    const int step_rows = kSegPerPiece / seg_per_row, step_col = kSegPerPiece % seg_per_row;
    /* the pieces of each run of rows (paired: the gate rows, then the up rows) */
    for (int run = 0; run < n_runs; run++) {
        int row = run * n_run + s0 / seg_per_row, col = s0 % seg_per_row;
        for (int64_t off = 0; off < bytes; off += kPiece, piece++) {
            const int n_seg = (int)(min((int64_t)kPiece, bytes - off) / kSeg);
            const int g0 = (int)(off / kSeg) + s0;
            const uint4 *w4 = reinterpret_cast<const uint4 *>(ring + st * kPiece) + s0 * 32 + lane;
            mbar_wait(&full[st], phase);
            if (kTimeline && tl && tid == 0 && piece < kTlPieces)
                tl[piece * 4 + 2] = now_ns();
            if (s0 + kSegPerWarp <= n_seg && col + kSegPerWarp <= seg_per_row) {
                /* the usual case: the whole run in one row, its loads first */
                start_row(row, cur, part, my_acc, lane);
                uint4 wv[kSegPerWarp], xv[kSegPerWarp];
#pragma unroll
                for (int u = 0; u < kSegPerWarp; u++) {
                    wv[u] = w4[u * 32];
                    xv[u] = xs4[(col + u) * 32 + lane];
                }
#pragma unroll
                for (int u = 0; u < kSegPerWarp; u++)
                    seg_dot<T>(wv[u], xv[u], part);
            } else if (seg_per_row >= kSegPerWarp && s0 < n_seg) {
                /* a run across one row boundary (its first `split` segments
                 * in `row`) or past the slice's end: the loads kGroup segments
                 * at a time before their sums (even past the end: still inside
                 * the stage and x), the same sums in the same order as segment
                 * by segment, with one row switch. Every 43-segment row of K =
                 * 11008 (Llama-2-7B's down GEMV) puts such a run in nearly
                 * every piece; segment by segment (two divisions a segment,
                 * each load waited for) warp 0 took 1.77 us on such a piece
                 * against 0.46 (timeline, 2026-12-01) */
                /* loads at a time: 4 or 8 spill (168 registers); all 8 with the
                 * next row summed apart fit now that no x register is carried
                 * between GEMVs, and ran 0.3% slower (the header's "Rejected") */
                constexpr int kGroup = 2;
                const int split = seg_per_row - col, n = min(kSegPerWarp, n_seg - s0);
                start_row(row, cur, part, my_acc, lane);
#pragma unroll
                for (int h = 0; h < kSegPerWarp; h += kGroup) {
                    uint4 wv[kGroup], xv[kGroup];
#pragma unroll
                    for (int u = h; u < h + kGroup; u++) {
                        wv[u - h] = w4[u * 32];
                        xv[u - h] = xs4[(u < split ? col + u : col + u - seg_per_row) * 32 + lane];
                    }
#pragma unroll
                    for (int u = h; u < h + kGroup; u++) {
                        if (u >= n)
                            break;
                        if (u == split)
                            start_row(row + 1, cur, part, my_acc, lane);
                        seg_dot<T>(wv[u - h], xv[u - h], part);
                    }
                }
            } else if (s0 < n_seg) {
                /* rows shorter than a run (K < 2048): segment by segment */
                for (int u = 0; u < kSegPerWarp && s0 + u < n_seg; u++) {
                    const int r = run * n_run + (g0 + u) / seg_per_row;
                    start_row(r, cur, part, my_acc, lane);
                    seg_dot<T>(w4[u * 32], xs4[((g0 + u) % seg_per_row) * 32 + lane], part);
                }
            }
            __syncwarp();
            if (lane == 0)
                mbar_arrive(&empty[st]); /* the producer may refill the stage */
            if (kTimeline && tl && tid == 0 && piece < kTlPieces)
                tl[piece * 4 + 3] = now_ns();
            if (++st == n_stages) {
                st = 0;
                phase ^= 1u;
            }
            row += step_rows;
            col += step_col;
            if (col >= seg_per_row) {
                col -= seg_per_row;
                row++;
            }
        }
    }
    start_row(-1, cur, part, my_acc, lane); /* the last row's sum */
    consumers_sync();
    if (rank && op.gemv.logits) { /* f32 rows, no bias, no residual (the backend's logits) */
        float v = 0.0f;
        if (tid < n_run)
#pragma unroll
            for (int w = 0; w < kWarps; w++)
                v += acc[w * n_rows + tid];
        rank_rows(static_cast<float *>(op.gemv.y), rows.x, op.gemv.logits - 1, n_run, v, rank);
        return;
    }
    if (tid >= n_run)
        return;
    const int row = rows.x + tid;
    if (pair) { /* gate row and up row: h = silu(g) * u, as ck_swiglu */
        float g = 0.0f, u = 0.0f;
#pragma unroll
        for (int w = 0; w < kWarps; w++) {
            g += acc[w * n_rows + tid];
            u += acc[w * n_rows + n_run + tid];
        }
        g += bias0;
        u += bias1;
        if (op.gemv.y_ck) { /* the gate/up product was kept narrow */
            g = round_to<T>(g);
            u = round_to<T>(u);
        }
        ck_from_f32(static_cast<T *>(op.gemv.y) + row, g / (1.0f + __expf(-g)) * u);
        return;
    }
    float v = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; w++)
        v += acc[w * n_rows + tid];
    v += bias0;
    if (op.gemv.resid) { /* as the op-by-op path: y rounded, then added */
        if (op.gemv.y_ck)
            v = round_to<T>(v);
        op.gemv.resid[row] = resid0 + v;
    } else if (op.gemv.y_ck) {
        ck_from_f32(static_cast<T *>(op.gemv.y) + row, v);
    } else {
        static_cast<float *>(op.gemv.y)[row] = v;
    }
}

template <class T> __device__ void embed_op(const ck_pstep_op &op) {
    const int D = op.embed.D;
    const T *row = static_cast<const T *>(op.embed.table) + (int64_t)op.embed.token[0] * D;
    for (int d = blockIdx.x * kConsumers + threadIdx.x; d < D; d += gridDim.x * kConsumers)
        op.embed.x[d] = ck_to_f32(row[d]);
}

/* the final norm (the one no GEMV takes), on block 0: y = w * (x / rms(x)) */
template <class T, bool kFolded> __device__ void norm_op(const ck_pstep_op &op, float *scratch) {
    if (blockIdx.x == 0) {
        norm_into<T, kFolded>(op.norm.x, op.norm.w, op.norm.eps, op.norm.D,
                              static_cast<T *>(op.norm.y), scratch);
    }
}

/* keys a warp has in flight a round, K and V kept as loaded (16-bit)
 * until used: 8 (4, 12 and, at head size 64, 16 measured slower: the
 * header's "Landed later") */
constexpr int kAttKeys = 8;

/* RoPE at pos on a row spread over a warp (lane: elements lane EPL ..
 * + EPL - 1), then rounded to the compute type, as ck_rope_kv_store stores
 * it: neox pairs (i, i + Dh/2) are 16 lanes apart, the others (2i, 2i + 1)
 * inside a lane. sn, cs: the angles of the lane's elements. Whole warp. */
template <class T, int EPL>
__device__ __forceinline__ void rope_row(float x[EPL], const float sn[EPL], const float cs[EPL],
                                         bool neox, int lane) {
    float y[EPL];
    if (neox) {
        const bool low = lane < 16; /* elements below Dh/2 */
#pragma unroll
        for (int e = 0; e < EPL; e++) {
            const float other = __shfl_xor_sync(0xffffffffu, x[e], 16);
            y[e] = low ? x[e] * cs[e] - other * sn[e] : x[e] * cs[e] + other * sn[e];
        }
    } else {
#pragma unroll
        for (int e = 0; e < EPL; e += 2) {
            y[e] = x[e] * cs[e] - x[e + 1] * sn[e];
            y[e + 1] = x[e + 1] * cs[e] + x[e] * sn[e];
        }
    }
#pragma unroll
    for (int e = 0; e < EPL; e++)
        x[e] = round_to<T>(y[e]);
}

/* A head's positions 0 .. ctx - 1 in splits: about one (head, split) item a
 * block, at least 32 keys a split (fewer splits, each walked in more
 * rounds, measured slower: 14.4 against 10.0 us a layer at 128..256
 * positions with two rounds of 8 keys a warp, H200, 2026-11-30) */
struct attn_splits {
    int n, len;
};

__device__ __forceinline__ attn_splits attn_split(const ck_pstep_op &op, int ctx) {
    int n = (int)gridDim.x / op.attn.H;
    n = min(max(n, 1), min(op.attn.max_splits, (ctx + 31) / 32));
    const int len = (ctx + n - 1) / n;
    return {(ctx + len - 1) / len, len};
}

__device__ __forceinline__ void prefetch_l2(const void *p, unsigned bytes) {
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
}

/* The pool rows this block's attention items will read (every position
 * but this step's, which comes from qkv) into L2 by bulk prefetches, one a
 * page run of K and of V, by warps 1..7 (thread 0 polls the barrier
 * meanwhile): issued while the block waits at the barrier before the GEMV
 * that makes q, k and v, they land while it streams, and the attention's
 * loads then wait on L2 rather than HBM. The pages depend on no activation
 * of the step. */
template <int Dh> __device__ void attn_prefetch(const ck_pstep_op &op) {
    constexpr int kFirst = 32; /* warp 0 polls */
    const int H = op.attn.H, Hkv = op.attn.Hkv, BS = op.attn.BS, ctx = op.attn.pos[0] + 1;
    const attn_splits sp = attn_split(op, ctx);
    const int32_t *bt = op.attn.block_tables + (int64_t)op.attn.seq[0] * op.attn.max_blocks;
    const uint8_t *kpool = static_cast<const uint8_t *>(op.attn.k_pool);
    const uint8_t *vpool = static_cast<const uint8_t *>(op.attn.v_pool);
    for (int item = blockIdx.x; item < H * sp.n; item += gridDim.x) {
        const int kvh = item / sp.n / (H / Hkv);
        const int p0 = item % sp.n * sp.len, p1 = min(ctx - 1, p0 + sp.len);
        if ((int)threadIdx.x < kFirst)
            break;
        for (int pg = p0 / BS + (int)threadIdx.x - kFirst; pg * BS < p1;
             pg += kConsumers - kFirst) {
            const int a = max(p0, pg * BS), b = min(p1, pg * BS + BS);
            const int64_t at = (((int64_t)bt[pg] * Hkv + kvh) * BS + a % BS) * Dh * 2;
            prefetch_l2(kpool + at, (unsigned)(b - a) * Dh * 2);
            prefetch_l2(vpool + at, (unsigned)(b - a) * Dh * 2);
        }
    }
}

/* A head's splits meet at its last split, the merger, with no atomic:
 * each other split stores its partial as 64-bit words, a value with the
 * split's L beside it (L >= 1: the key at the split's max scores exp(0)),
 * relaxed; a word whose L half is 0 is not written yet. The merger loads
 * each until it is, and clears it for the next layer. Why not a counter
 * that the last split to arrive learns it is last from (the form before):
 * its atomic's release waits for the block's weight copies in flight, and
 * the merger's loads took one L2 round trip more (header, "Landed later").
 * Every split has a block of its own (n_split >= 2 only when H * n_split
 * <= the grid, all resident), so the merger's wait ends.
 * Words of a split: (M, L), then (O[d], L) for d < Dh. */
__device__ __forceinline__ void tagged_store(unsigned long long *p, float v, float l) {
    const unsigned long long w = (unsigned long long)__float_as_uint(l) << 32 | __float_as_uint(v);
    asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(w) : "memory");
}

__device__ __forceinline__ unsigned long long tagged_load(const unsigned long long *p) {
    unsigned long long w;
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(w) : "l"(p) : "memory");
    return w;
}

__device__ __forceinline__ void tagged_clear(const unsigned long long *p) {
    asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(0ull) : "memory");
}

/* thread d < Dh of a split that is not its head's last */
__device__ __forceinline__ void split_publish(unsigned long long *words, float M, float L,
                                              float O, int d) {
    tagged_store(words + 1 + d, O, L);
    if (d == 0)
        tagged_store(words, M, L);
}

/* Thread d < Dh of the head's last split (sp = n_split - 1, its own
 * partial M, L, O): element d of the head's output, the splits merged in
 * order, kMergeU at a time with all their loads in flight (one L2 round
 * trip for the usual <= 4 when they are written). It clears its O words;
 * the (M, L) words, which every thread reads, are cleared after the
 * block's next sync (attn_op). */
__device__ __forceinline__ float split_merge(const unsigned long long *head, int n_split,
                                             int Dh, float M, float L, float O, int d) {
    constexpr int kMergeU = 4;
    const int sp = n_split - 1;
    float MM = -INFINITY, LL = 0.0f, OO = 0.0f;
    for (int s0 = 0; s0 < n_split; s0 += kMergeU) {
        unsigned long long wm[kMergeU], wo[kMergeU]; /* ~0: nothing to wait for */
#pragma unroll
        for (int u = 0; u < kMergeU; u++) {
            const unsigned long long *words = head + (int64_t)(s0 + u) * (Dh + 1);
            const bool other = s0 + u < sp;
            wm[u] = other ? tagged_load(words) : ~0ull;
            wo[u] = other ? tagged_load(words + 1 + d) : ~0ull;
        }
        for (bool all = false; !all;) {
            all = true;
#pragma unroll
            for (int u = 0; u < kMergeU; u++) {
                const unsigned long long *words = head + (int64_t)(s0 + u) * (Dh + 1);
                if (!(wm[u] >> 32)) {
                    all = false;
                    wm[u] = tagged_load(words);
                }
                if (!(wo[u] >> 32)) {
                    all = false;
                    wo[u] = tagged_load(words + 1 + d);
                }
            }
        }
        float ms[kMergeU], ls[kMergeU], os[kMergeU];
#pragma unroll
        for (int u = 0; u < kMergeU; u++) {
            const int s = s0 + u;
            if (s > sp) {
                ms[u] = -INFINITY, ls[u] = 0.0f, os[u] = 0.0f;
            } else if (s == sp) {
                ms[u] = M, ls[u] = L, os[u] = O;
            } else {
                ms[u] = __uint_as_float((unsigned)wm[u]);
                ls[u] = __uint_as_float((unsigned)(wm[u] >> 32));
                os[u] = __uint_as_float((unsigned)wo[u]);
                tagged_clear(head + (int64_t)s * (Dh + 1) + 1 + d);
            }
        }
        float mx = MM;
#pragma unroll
        for (int u = 0; u < kMergeU; u++)
            mx = fmaxf(mx, ms[u]);
        const float keep = __expf(MM - mx); /* 0 at the first */
        LL *= keep;
        OO *= keep;
#pragma unroll
        for (int u = 0; u < kMergeU; u++) {
            const float c = __expf(ms[u] - mx);
            LL += ls[u] * c;
            OO += os[u] * c;
        }
        MM = mx;
    }
    return OO / LL;
}

/* Flash-decoding over (head, split) items, one a block at a time: warp w
 * takes keys p0 + w, p0 + w + 8, ... (lanes across Dh), keeps a running
 * max, sum and output; the block merges its warps; a head of one split
 * writes out directly, else the split's partial goes to the head's last
 * split, which merges them all (split_merge). The op waits at the barrier
 * before it (`before`) itself, once it has the angles and its first
 * round's pages: they need no activation of the step, and their chains of
 * dependent loads (the op's fields, the position, the block table; the
 * frequencies) then run while the block waits, so that q and the first
 * round's rows come in one round trip after it. */
template <class T, int EPL>
__device__ void attn_op(const ck_pstep_op &op, float *scratch, uint64_t *tl_op,
                        const barrier_wait &before) {
    constexpr int Dh = 32 * EPL, ATT_U = kAttKeys;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int H = op.attn.H, Hkv = op.attn.Hkv, BS = op.attn.BS;
    const int ctx = op.attn.pos[0] + 1;
    const int32_t *bt = op.attn.block_tables + (int64_t)op.attn.seq[0] * op.attn.max_blocks;
    const attn_splits splits = attn_split(op, ctx);
    const int n_split = splits.n, split_len = splits.len;
    const T *kpool = static_cast<const T *>(op.attn.k_pool);
    const T *vpool = static_cast<const T *>(op.attn.v_pool);
    const T *qkv = static_cast<const T *>(op.attn.qkv);
    constexpr int PART = Dh + 2;
    /* the angles of this lane's elements at pos (neox: element i and i +
     * Dh/2 share frequency i; gptj: 2i and 2i + 1 share i) */
    float sn[EPL], cs[EPL];
#pragma unroll
    for (int e = 0; e < EPL; e++) {
        const int i = lane * EPL + e;
        const int f = op.attn.neox ? i % (Dh / 2) : i / 2;
        sincosf((float)(ctx - 1) * op.attn.inv_freq[f], &sn[e], &cs[e]);
    }

    if ((int)blockIdx.x >= H * n_split)
        grid_wait(before); /* no item */
    for (int item = blockIdx.x; item < H * n_split; item += gridDim.x) {
        const int h = item / n_split, sp = item % n_split, kvh = h / (H / Hkv);
        const int p0 = sp * split_len, p1 = min(ctx, p0 + split_len);
        /* a round: keys p, p + 8, ... (ATT_U of them) of this warp, kept
         * as loaded (EPL elements of T a lane) until used */
        typedef typename ck_vec<EPL * sizeof(T)>::type KV;
        KV kr[ATT_U], vr[ATT_U];
        /* lane u < ATT_U: the page of key p + u kWarps of a round p, loaded
         * a round ahead, so that a round's rows are one round trip away */
        auto pages_of = [&](int p) {
            const int pp = p + lane * kWarps;
            return lane < ATT_U && pp < p1 ? bt[pp / BS] : 0;
        };
        /* the round's rows (page: pages_of(p)) */
        auto load_keys = [&](int p, int page) {
#pragma unroll
            for (int u = 0; u < ATT_U; u++) {
                const int pp = p + u * kWarps;
                if (pp >= p1)
                    continue;
                const int pg = __shfl_sync(0xffffffffu, page, u);
                const int64_t at = (((int64_t)pg * Hkv + kvh) * BS + pp % BS) * Dh + lane * EPL;
                if (pp == ctx - 1) {
                    /* this step's k and v: from qkv, k rotated here; the
                     * group's first head puts them in the pool for the
                     * steps after */
                    float kf[EPL];
                    T kh[EPL];
                    ck_load_n_cg<T, EPL>(qkv + (int64_t)(H + kvh) * Dh + lane * EPL, kf);
                    rope_row<T, EPL>(kf, sn, cs, op.attn.neox, lane);
#pragma unroll
                    for (int e = 0; e < EPL; e++)
                        ck_from_f32(&kh[e], kf[e]); /* exact: rope_row rounded to T */
                    memcpy(&kr[u], kh, sizeof kr[u]);
                    vr[u] = __ldcg(reinterpret_cast<const KV *>(
                        qkv + (int64_t)(H + Hkv + kvh) * Dh + lane * EPL));
                    if (h % (H / Hkv) == 0) {
                        *reinterpret_cast<KV *>(const_cast<T *>(kpool) + at) = kr[u];
                        *reinterpret_cast<KV *>(const_cast<T *>(vpool) + at) = vr[u];
                    }
                } else {
                    kr[u] = __ldcg(reinterpret_cast<const KV *>(kpool + at));
                    vr[u] = __ldcg(reinterpret_cast<const KV *>(vpool + at));
                }
            }
        };
        /* the first two rounds' pages (lane u: row u's), the wait (the
         * first item), then q and the round's rows in flight together, then
         * q rotated */
        const int page = pages_of(p0 + warp);
        int next_page = pages_of(p0 + warp + kWarps * ATT_U);
        if (item == (int)blockIdx.x)
            grid_wait(before);
        float q[EPL];
        ck_load_n_cg<T, EPL>(qkv + (int64_t)h * Dh + lane * EPL, q);
        if (p0 + warp < p1)
            load_keys(p0 + warp, page);
        rope_row<T, EPL>(q, sn, cs, op.attn.neox, lane);
#pragma unroll
        for (int e = 0; e < EPL; e++)
            q[e] *= op.attn.scale;
        if (kTimeline && tl_op && tid == 0)
            tl_op[4] = now_ns();
        float m = -INFINITY, l = 0.0f, o[EPL];
#pragma unroll
        for (int e = 0; e < EPL; e++)
            o[e] = 0.0f;
        for (int p = p0 + warp; p < p1; p += kWarps * ATT_U) {
            /* the round's scores together (their shuffles interleave), then
             * one rescale for the round. A key past p1 holds no row (its
             * registers may be anything): it is left out, not weighted 0 */
            const int n_keys = min(ATT_U, (p1 - p + kWarps - 1) / kWarps);
            float sc[ATT_U];
#pragma unroll
            for (int u = 0; u < ATT_U; u++) {
                sc[u] = 0.0f;
                if (u >= n_keys)
                    continue;
                float kf[EPL];
                ck_unpack_n<T, EPL>(kr[u], kf);
#pragma unroll
                for (int e = 0; e < EPL; e++)
                    sc[u] = fmaf(q[e], kf[e], sc[u]);
            }
#pragma unroll
            for (int x = 16; x > 0; x >>= 1)
#pragma unroll
                for (int u = 0; u < ATT_U; u++)
                    sc[u] += __shfl_xor_sync(0xffffffffu, sc[u], x);
            float m_new = m;
#pragma unroll
            for (int u = 0; u < ATT_U; u++)
                if (u < n_keys)
                    m_new = fmaxf(m_new, sc[u]);
            const float corr = __expf(m - m_new);
            l *= corr;
#pragma unroll
            for (int e = 0; e < EPL; e++)
                o[e] *= corr;
#pragma unroll
            for (int u = 0; u < ATT_U; u++) {
                if (u >= n_keys)
                    break;
                float vf[EPL];
                ck_unpack_n<T, EPL>(vr[u], vf);
                const float pe = __expf(sc[u] - m_new);
                l += pe;
#pragma unroll
                for (int e = 0; e < EPL; e++)
                    o[e] = fmaf(pe, vf[e], o[e]);
            }
            m = m_new;
            if (p + kWarps * ATT_U < p1) { /* the next round, and the pages of the one after */
                load_keys(p + kWarps * ATT_U, next_page);
                next_page = pages_of(p + 2 * kWarps * ATT_U);
            }
        }
        if (kTimeline && tl_op && tid == 0)
            tl_op[5] = now_ns();
        /* merge the warps */
        float *wp = scratch + warp * PART;
#pragma unroll
        for (int e = 0; e < EPL; e++)
            wp[2 + lane * EPL + e] = o[e];
        if (lane == 0) {
            wp[0] = m;
            wp[1] = l;
        }
        consumers_sync();
        float M = -INFINITY, L = 0.0f, O = 0.0f;
        if (tid < Dh) {
#pragma unroll
            for (int w = 0; w < kWarps; w++)
                M = fmaxf(M, scratch[w * PART]);
#pragma unroll
            for (int w = 0; w < kWarps; w++) {
                const float c = scratch[w * PART + 1] > 0.0f ? __expf(scratch[w * PART] - M) : 0.0f;
                L += scratch[w * PART + 1] * c;
                O += scratch[w * PART + 2 + tid] * c;
            }
        }
        if (kTimeline && tl_op && tid == 0)
            tl_op[6] = now_ns();
        T *out = static_cast<T *>(op.attn.out) + (int64_t)h * Dh;
        if (n_split == 1) {
            if (tid < Dh)
                ck_from_f32(out + tid, O / L);
        } else if (tid < Dh) {
            unsigned long long *head = op.attn.parts + (int64_t)h * n_split * (Dh + 1);
            if (sp != n_split - 1)
                split_publish(head + (int64_t)sp * (Dh + 1), M, L, O, tid);
            else
                ck_from_f32(out + tid, split_merge(head, n_split, Dh, M, L, O, tid));
        }
        if (kTimeline && tl_op && tid == 0)
            tl_op[7] = now_ns();
        consumers_sync(); /* scratch is reused by the next item */
        /* the merger's threads have all read the other splits' (M, L) */
        if (n_split > 1 && sp == n_split - 1 && tid < n_split - 1)
            tagged_clear(op.attn.parts + ((int64_t)h * n_split + tid) * (Dh + 1));
    }
}

/* as ck_swiglu: h = g / (1 + exp(-g)) * u */
template <class T> __device__ void swiglu_op(const ck_pstep_op &op) {
    const int F = op.swiglu.F;
    for (int i = blockIdx.x * kConsumers + threadIdx.x; i < F; i += gridDim.x * kConsumers) {
        float g, u;
        if (op.swiglu.gu_ck) {
            g = ck_to_f32(__ldcg(static_cast<const T *>(op.swiglu.gu) + i));
            u = ck_to_f32(__ldcg(static_cast<const T *>(op.swiglu.gu) + F + i));
        } else {
            g = __ldcg(static_cast<const float *>(op.swiglu.gu) + i);
            u = __ldcg(static_cast<const float *>(op.swiglu.gu) + F + i);
        }
        ck_from_f32(static_cast<T *>(op.swiglu.h) + i, g / (1.0f + __expf(-g)) * u);
    }
}

template <class T> __device__ void gather_op(const ck_pstep_op &op) {
    const int D = op.gather.D;
    const T *x = static_cast<const T *>(op.gather.x) + (int64_t)op.gather.row[0] * op.gather.ldx;
    for (int d = blockIdx.x * kConsumers + threadIdx.x; d < D; d += gridDim.x * kConsumers)
        static_cast<T *>(op.gather.y)[d] = __ldcg(x + d);
}

template <class T, int EPL, bool kFolded>
__global__ void __launch_bounds__(kThreads, 1)
    pstep_kernel(const ck_pstep_op *__restrict__ prog, int n_op, int x_bytes, int n_stages,
                 unsigned *sync, uint64_t *trace, uint64_t *tl, int32_t *tokens,
                 ck_chain chain) {
    extern __shared__ __align__(128) uint8_t smem[];
    if (kTimeline && tl)
        tl += (int64_t)blockIdx.x * kTlStride;
    __shared__ uint64_t full[kMaxStages], empty[kMaxStages];
    __shared__ float scratch[kWarps];
    __shared__ int arrived; /* the last op whose barrier arrival is released, + 1 */
    uint16_t *xs = reinterpret_cast<uint16_t *>(smem);
    float *acc = reinterpret_cast<float *>(smem + x_bytes);
    uint8_t *ring = smem + x_bytes + kAccBytes;

    if (threadIdx.x == 0) {
        arrived = 0;
        for (int st = 0; st < n_stages; st++) {
            mbar_init(&full[st], 1);
            mbar_init(&empty[st], kWarps);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x >= kConsumers) {
        if (threadIdx.x == kConsumers)
            produce(prog, n_op, ring, n_stages, full, empty, tl, &arrived);
        return;
    }
    int piece = 0;
    /* op i's timeline stamps */
    auto tl_of = [&](int i) {
        return kTimeline && tl && i < kTlOps ? tl + kTlPieces * 4 + kTlOpSlots * i : nullptr;
    };
    for (int i = 0; i < n_op; i++) {
        const ck_pstep_op &op = prog[i];
        uint64_t *tl_op = tl_of(i);
        /* the barrier after op i - 1 (none before the first op) */
        auto before = [&] {
            return barrier_wait{i > 0 ? sync : nullptr, (unsigned)i * gridDim.x,
                                trace && i > 0 ? trace + 3 * (i - 1) : nullptr,
                                i > 0 ? tl_of(i - 1) : nullptr};
        };
        switch (op.kind) {
        case CKP_GEMV: {
            /* while thread 0 waits for the other blocks, warps 1..7 issue
             * the K/V prefetch of the attention after this GEMV (it needs
             * no activation of the op before). The norm's weights are
             * loaded after the wait, beside x (header, "Landed later") */
            if (i + 1 < n_op && prog[i + 1].kind == CKP_ATTN)
                attn_prefetch<32 * EPL>(prog[i + 1]);
            grid_wait(before());
            gemv_op<T, kFolded>(
                op, ring, n_stages, xs, acc, full, empty, piece, scratch, tl, tl_op,
                tokens ? reinterpret_cast<unsigned long long *>(sync + 2) : nullptr);
            break;
        }
        case CKP_ATTN: /* it waits itself, after the loads it can make before */
            attn_op<T, EPL>(op, reinterpret_cast<float *>(xs), tl_op, before());
            break;
        case CKP_EMBED: grid_wait(before()); embed_op<T>(op); break;
        case CKP_NORM: grid_wait(before()); norm_op<T, kFolded>(op, scratch); break;
        case CKP_SWIGLU: grid_wait(before()); swiglu_op<T>(op); break;
        case CKP_GATHER: grid_wait(before()); gather_op<T>(op); break;
        }
        if (i + 1 < n_op)
            grid_arrive(sync, trace ? trace + 3 * i : nullptr, tl_op, &arrived, i);
    }
    /* The last block out: a greedy step's token (every block's rank is in:
     * each ranked before it counted itself out), and the counters zeroed for
     * the next launch (every block is past its last barrier wait). */
    if (threadIdx.x == 0) {
        __threadfence();
        if (atomicAdd(sync + 1, 1u) == gridDim.x - 1) {
            __threadfence();
            auto *rank = reinterpret_cast<unsigned long long *>(sync + 2);
            const unsigned long long key = atomicExch(rank, 0ull);
            if (tokens)
                ck_chain_emit(tokens, ck_logit_key_id(key), chain, chain.tok ? *chain.count : 0);
            sync[0] = 0;
            sync[1] = 0;
        }
    }
}

int n_sm_cached = 0;

/* Shared memory: x (the widest K, and the attention's merge), acc, then
 * as many ring stages as fit. */
struct pstep_layout {
    int x_bytes, n_stages, smem;
};

pstep_layout layout_for(int max_k, int dh) {
    pstep_layout L;
    const int x = max(max_k * 2, kWarps * (dh + 2) * 4);
    L.x_bytes = (x + 127) / 128 * 128;
    L.n_stages = min(kMaxStages, (kSmemMax - L.x_bytes - kAccBytes) / kPiece);
    L.smem = L.x_bytes + kAccBytes + L.n_stages * kPiece;
    return L;
}

/* The timeline (kTimeline builds): which launch to record, where. The
 * launch count is the process's (diagnostics: one engine at a time). */
struct timeline_state {
    bool parsed;
    int step, launches;
    char file[512];
    uint64_t *dev;
};
timeline_state timeline;

/* the buffer for this launch, or NULL when it is not the one recorded */
uint64_t *timeline_begin(cudaStream_t s, int blocks) {
    if (!kTimeline)
        return nullptr;
    if (!timeline.parsed) {
        timeline.parsed = true;
        timeline.step = -1;
        const char *e = getenv("HEADROOM_CUDA_PSTEP_TIMELINE");
        if (e && sscanf(e, "%d:%511s", &timeline.step, timeline.file) != 2)
            timeline.step = -1;
    }
    if (timeline.launches++ != timeline.step)
        return nullptr;
    const size_t bytes = (size_t)blocks * kTlStride * 8;
    if (!timeline.dev && cudaMalloc((void **)&timeline.dev, bytes) != cudaSuccess) {
        timeline.dev = nullptr;
        return nullptr;
    }
    (void)cudaMemsetAsync(timeline.dev, 0, bytes, s);
    return timeline.dev;
}

/* waits for the recorded launch and writes: int32 blocks, ops, stages,
 * kTlPieces, kTlOps, kPiece, kTlOpSlots; per op int32 kind, N, K, pair; then the
 * blocks' records (uint64). Frees the buffer: one step is recorded. */
void timeline_write(cudaStream_t s, const ck_pstep_op *ops, int n_op, int blocks, int n_stages) {
    const size_t bytes = (size_t)blocks * kTlStride * 8;
    uint64_t *h = static_cast<uint64_t *>(malloc(bytes));
    ck_pstep_op *hops = static_cast<ck_pstep_op *>(malloc((size_t)n_op * sizeof *hops));
    FILE *f = fopen(timeline.file, "wb");
    bool ok = h && hops && f && cudaStreamSynchronize(s) == cudaSuccess &&
              cudaMemcpy(h, timeline.dev, bytes, cudaMemcpyDeviceToHost) == cudaSuccess &&
              cudaMemcpy(hops, ops, (size_t)n_op * sizeof *hops, cudaMemcpyDeviceToHost) ==
                  cudaSuccess;
    if (ok) {
        const int32_t hdr[7] = {blocks, n_op, n_stages, kTlPieces, kTlOps, kPiece, kTlOpSlots};
        ok = fwrite(hdr, sizeof hdr, 1, f) == 1;
        for (int i = 0; ok && i < n_op; i++) {
            const bool g = hops[i].kind == CKP_GEMV;
            const int32_t r[4] = {(int32_t)hops[i].kind, g ? hops[i].gemv.N : 0,
                                  g ? hops[i].gemv.K : 0, g ? hops[i].gemv.pair : 0};
            ok = fwrite(r, sizeof r, 1, f) == 1;
        }
        ok = ok && fwrite(h, bytes, 1, f) == 1;
    }
    fprintf(stderr, "pstep timeline: %s %s\n", ok ? "wrote" : "could not write", timeline.file);
    if (f)
        fclose(f);
    free(h);
    free(hops);
    (void)cudaFree(timeline.dev);
    timeline.dev = nullptr;
}

template <class T, int EPL, bool kFolded>
void pstep_launch(cudaStream_t s, const ck_pstep_op *ops, int n_op, int max_k, unsigned *sync,
                  uint64_t *trace, int32_t *tokens, const ck_chain *greedy) {
    auto kernel = pstep_kernel<T, EPL, kFolded>;
    const pstep_layout L = layout_for(max_k, 32 * EPL);
    (void)cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, L.smem);
    /* every block must be resident at once (the grid barrier): a
     * cooperative launch guarantees it or fails */
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeCooperative;
    attr.val.cooperative = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)ck_pstep_blocks());
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = (size_t)L.smem;
    cfg.stream = s;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    uint64_t *tl = timeline_begin(s, (int)cfg.gridDim.x);
    const ck_chain chain = greedy ? *greedy : ck_chain{};
    (void)cudaLaunchKernelEx(&cfg, kernel, ops, n_op, L.x_bytes, L.n_stages, sync, trace, tl,
                             greedy ? tokens : nullptr, chain);
    if (tl)
        timeline_write(s, ops, n_op, (int)cfg.gridDim.x, L.n_stages);
}

/* whether one block fits on an SM (registers, shared memory): the grid
 * barrier needs every block resident */
template <class T, int EPL, bool kFolded> bool pstep_fits(int max_k) {
    auto kernel = pstep_kernel<T, EPL, kFolded>;
    const pstep_layout L = layout_for(max_k, 32 * EPL);
    int n = 0;
    return L.n_stages >= 2 &&
           cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, L.smem) ==
               cudaSuccess &&
           cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kThreads, L.smem) ==
               cudaSuccess &&
           n >= 1;
}

/* The kernel forms of head size 32 x EPL: bf16 has both (which one runs
 * depends on the step's norms); f16 folds no norm (cuda_backend.c's
 * fold_norm), so only the form that loads them is built for it, and it is
 * right for any program. */
template <int EPL> bool pstep_forms_fit(ck_dtype dt, int max_k) {
    if (dt == CK_BF16)
        return pstep_fits<__nv_bfloat16, EPL, false>(max_k) &&
               pstep_fits<__nv_bfloat16, EPL, true>(max_k);
    return pstep_fits<__half, EPL, false>(max_k);
}

template <int EPL>
void pstep_launch_form(cudaStream_t s, const ck_pstep_op *ops, int n_op, int max_k,
                       unsigned *sync, ck_dtype dt, bool folded, uint64_t *trace,
                       int32_t *tokens, const ck_chain *greedy) {
    if (folded && dt == CK_BF16)
        pstep_launch<__nv_bfloat16, EPL, true>(s, ops, n_op, max_k, sync, trace, tokens, greedy);
    else
        CK_DISPATCH(dt, (pstep_launch<T, EPL, false>(s, ops, n_op, max_k, sync, trace, tokens,
                                                     greedy)));
}

} // namespace

extern "C" int ck_pstep_supported(ck_dtype dt, int dh, int max_k) {
    if ((dh != 64 && dh != 128) || max_k > CK_PSTEP_MAX_K)
        return 0;
    const bool ok = dh == 64 ? pstep_forms_fit<2>(dt, max_k) : pstep_forms_fit<4>(dt, max_k);
    (void)cudaGetLastError();
    return ok;
}

extern "C" int ck_pstep_blocks(void) {
    if (n_sm_cached == 0) {
        int dev = 0;
        (void)cudaGetDevice(&dev);
        (void)cudaDeviceGetAttribute(&n_sm_cached, cudaDevAttrMultiProcessorCount, dev);
    }
    return n_sm_cached;
}

extern "C" void ck_pstep_run(cudaStream_t s, const ck_pstep_op *ops, int n_op, int max_k,
                             unsigned *sync, ck_dtype dt, int dh, bool folded, uint64_t *trace,
                             int32_t *tokens, const ck_chain *greedy) {
    if (n_op <= 0)
        return;
    if (dh == 64)
        pstep_launch_form<2>(s, ops, n_op, max_k, sync, dt, folded, trace, tokens, greedy);
    else
        pstep_launch_form<4>(s, ops, n_op, max_k, sync, dt, folded, trace, tokens, greedy);
}
