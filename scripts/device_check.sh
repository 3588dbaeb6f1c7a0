#!/usr/bin/env bash
# Runs on the GPU machine (device tool), from the repository root, with the
# binaries scripts/device_pack.sh made carried in .dev/pack/ (unpacked here):
#   correctness first (each CUDA op against the CPU op, the attention and
#   GEMV/sampling kernels against float64, whole models against the float32
#   references), then the benchmarks, then transformers on the same shape.
# Results go to $OUT (JSON lines for bench/results/), a short table last.
#   scripts/device_check.sh [checks] [bench] [packed] [hf] [compiled] [sweep] [profile]
#                           [ablate] [fallback] [sm80] [quality]
#   (default: checks bench packed hf sweep; packed: quantized weights kept
#   packed on the GPU, decode by type against --expand, the 8 GiB and 12 GiB
#   recipes; quality: decode tok/s by weight type for README's quality table;
#   fallback: the generic path an Ampere or
#   Ada GPU takes (caps.cu), forced on this GPU by HEADROOM_CUDA_ARCH_FALLBACK
#   (=86: also at an RTX 30xx/40xx's 99 KB of shared memory a block): the
#   ops against the CPU, the models, the attention kernels and a bench row;
#   sm80: the same with the binaries of scripts/device_pack.sh 80 (.dev/
#   device-sm80: compute_80 code, compiled by the driver at load, which
#   takes the generic path unforced); profile: GPU time per op and rows of the step
#   for prefills of 512 and 2048 and a batch of 64, eager steps, from
#   HEADROOM_CUDA_PROFILE; ablate: batch-1 decode op by op (no persistent
#   step), and without programmatic
#   dependent launch, 64 sequences and the 32k context with every decode step
#   at all flash-decoding splits, batch 1 with 1 and 3 splits; compiled:
#   transformers with static cache + torch.compile). Bench figures are medians
#   of --repeat runs, their spread in the JSON.
set -u
cd "$(dirname "$0")/.."
for t in .dev/pack/*.tar.xz; do # the packs travel compressed
  [[ -f $t && ! -d .dev/$(basename $t .tar.xz) ]] && tar -xJf $t -C .dev
done
D=$PWD/.dev/device
export LD_LIBRARY_PATH=$D/lib:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
# the binaries name files by the path of the checkout they were built in
src=$(cat $D/source_dir)
if [[ -n "$src" && "$src" != "$PWD" && ! -e "$src" ]]; then
  mkdir -p "$(dirname "$src")" && ln -s "$PWD" "$src"
fi
what=${*:-checks bench packed hf sweep}
# each part has a time limit, so one slow part cannot starve the others of
# the session's device time (what finished is already in $OUT)
T="timeout --signal=KILL"
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv,noheader

if [[ $what == *checks* ]]; then
  echo "== attention kernels";   $T 90 $D/attention_check    2>&1 | tee $OUT/attention_check.txt | tail -40
  echo "== gemv + sampling";     $T 90 $D/gemv_sample_check  2>&1 | tee $OUT/gemv_sample_check.txt | tail -40
  echo "== backend ops vs cpu";  $T 90 $D/test_backend_ops   2>&1 | tee $OUT/test_backend_ops.txt | tail -80
  echo "== models vs reference"; $T 90 $D/test_cuda_model    2>&1 | tee $OUT/test_cuda_model.txt | tail -30
  echo "== NaN logits fail their request, on the cpu and the gpu"
  $T 120 $D/test_bad_numbers 2>&1 | tee $OUT/test_bad_numbers.txt | tail -5
  echo "== packed weights: kernels against float64 and the reference dequantizer"
  $T 240 $D/packed_check --no-timing 2>&1 | tee $OUT/packed_check.txt | grep -E "FAIL|passed" | tail -40
  echo "== packed weights through the backend, and SmolLM2 Q4_1 on the gpu against the cpu"
  $T 150 $D/test_cuda_packed 2>&1 | tee $OUT/test_cuda_packed.txt | tail -30
  echo "== persistent step vs op by op"
  $T 300 $D/test_cuda_pstep 2>&1 | tee $OUT/test_cuda_pstep.txt | tail -20
fi
B="$D/headroom bench --device cuda --json"
if [[ $what == *bench* ]]; then
  echo "== bench llama2-7b matrix"
  $T 150 $B --synthetic llama2-7b --prompt 128 --gen 256 --mem-report --repeat 3 \
     --dtype bf16,f16 --attn flash,naive --graphs on,off 2>&1 | tee $OUT/bench.jsonl
  echo "== overlap: a lone sequence's next step queued before its token is in, or not"
  $T 120 $B --synthetic llama2-7b --prompt 128 --gen 256 --repeat 3 --overlap on,off 2>&1 |
    tee -a $OUT/bench.jsonl
  echo "== norm fold: each norm's weight folded into the bf16 matrix after it at load, or not"
  $T 120 $B --synthetic llama2-7b --prompt 128 --gen 256 --repeat 3 --norm-fold on,off 2>&1 |
    tee -a $OUT/bench.jsonl
  for p in 512 2048; do
    $T 120 $B --synthetic llama2-7b --prompt $p --gen 2 --repeat 7 2>&1 | tee -a $OUT/bench.jsonl
  done
  $T 120 $B --synthetic llama2-7b --prompt 128 --gen 256 --batch 64 --repeat 3 2>&1 |
    tee -a $OUT/bench.jsonl
  $T 120 $B --synthetic llama2-7b --prompt 32768 --gen 64 --ctx 32832 --repeat 2 2>&1 |
    tee -a $OUT/bench.jsonl
fi
if [[ $what == *packed* ]]; then
  echo "== packed weights: decode by type (batch 1), prefill 512, 64 sequences, against --expand"
  for w in q8_0 q4_0 q4_k q6_k q5_k nf4 fp4; do
    $T 90 $B --synthetic llama2-7b --weights $w --prompt 128 --gen 256 --repeat 3 2>&1 |
      tee -a $OUT/packed.jsonl
  done
  $T 90 $B --synthetic llama2-7b --weights q4_0 --expand --prompt 128 --gen 256 --repeat 3 \
    2>&1 | tee -a $OUT/packed.jsonl
  $T 90 $B --synthetic llama2-7b --weights q4_k --prompt 512 --gen 2 --repeat 5 2>&1 |
    tee -a $OUT/packed.jsonl
  $T 120 $B --synthetic llama2-7b --weights q4_k --prompt 128 --gen 256 --batch 64 --repeat 2 \
    2>&1 | tee -a $OUT/packed.jsonl
  echo "== the 8 GiB recipe: llama2-7b shape, q4_k, 4096 context, under --mem 8GiB"
  $T 90 $B --synthetic llama2-7b --weights q4_k --mem 8GiB --ctx 4096 --prompt 3072 --gen 256 \
    --mem-report 2>&1 | tee -a $OUT/packed.jsonl | grep -E "memory|^cuda"
  echo "== the same recipe in nf4 (bitsandbytes' 4-bit type, packed)"
  $T 90 $B --synthetic llama2-7b --weights nf4 --mem 8GiB --ctx 4096 --prompt 3072 --gen 256 \
    --mem-report 2>&1 | tee -a $OUT/packed.jsonl | grep -E "memory|^cuda"
  echo "== nf4 and fp4: prefill 512 and 64 sequences"
  for w in nf4 fp4; do
    $T 90 $B --synthetic llama2-7b --weights $w --prompt 512 --gen 2 --repeat 5 2>&1 |
      tee -a $OUT/packed.jsonl
  done
  $T 120 $B --synthetic llama2-7b --weights nf4 --prompt 128 --gen 256 --batch 64 --repeat 2 \
    2>&1 | tee -a $OUT/packed.jsonl
  echo "== 13B shape, q4_k, under --mem 12GiB"
  $T 90 $B --synthetic llama2-13b --weights q4_k --mem 12GiB --ctx 4096 --prompt 128 \
    --gen 128 --mem-report 2>&1 | tee -a $OUT/packed.jsonl | grep -E "memory|^cuda"
fi
if [[ $what == *quality* ]]; then
  echo "== the quality table's GPU column: decode by weight type, embedded model and SmolLM2's shape"
  for w in q8_0 int8 q6_k q5_k q4_k q5_0 q4_1 q4_0 nf4 fp4 q3_k q2_k; do
    $T 60 $B -m models/tiny-shakespeare --weights $w --prompt 64 --gen 64 --repeat 3 2>&1 |
      grep '^{' | tee -a $OUT/quality.jsonl
    [[ $w == int8 ]] && continue # int8 quantizes a file (LLM.int8 rows run as q8_0's)
    $T 60 $B --synthetic smollm2-135m --weights $w --prompt 64 --gen 64 --repeat 3 2>&1 |
      grep '^{' | tee -a $OUT/quality.jsonl
  done
fi
if [[ $what == *ablate* ]]; then
  echo "== batch 1 op by op (no persistent step)"
  HEADROOM_CUDA_PSTEP=0 $T 120 $B --synthetic llama2-7b --prompt 128 --gen 256 --repeat 3 \
    2>&1 | tee $OUT/ablate.jsonl
  echo "== without programmatic dependent launch"
  HEADROOM_CUDA_PDL=0 $T 120 $B --synthetic llama2-7b --prompt 128 --gen 256 \
    --graphs on,off 2>&1 | tee -a $OUT/ablate.jsonl
  echo "== every decode step at all flash-decoding splits"
  HEADROOM_CUDA_DEC_FILL=0 $T 120 $B --synthetic llama2-7b --prompt 128 --gen 256 --batch 64 \
    2>&1 | tee -a $OUT/ablate.jsonl
  HEADROOM_CUDA_DEC_FILL=0 $T 120 $B --synthetic llama2-7b --prompt 32768 --gen 64 --ctx 32832 \
    2>&1 | tee -a $OUT/ablate.jsonl
  echo "== batch 1 with 1 and 3 flash-decoding splits (fill 32, 96 blocks)"
  for f in 32 96; do
    HEADROOM_CUDA_DEC_FILL=$f $T 120 $B --synthetic llama2-7b --prompt 128 --gen 256 --repeat 3 \
      2>&1 | tee -a $OUT/ablate.jsonl
  done
fi
if [[ $what == *profile* ]]; then
  echo "== GPU time per op (graphs off)"
  for p in 512 2048; do
    HEADROOM_CUDA_PROFILE=1 $T 120 $B --synthetic llama2-7b --prompt $p --gen 4 \
      --graphs off 2>&1 | grep -E "profile|^\{" | tee -a $OUT/profile.txt
  done
  HEADROOM_CUDA_PROFILE=1 $T 120 $B --synthetic llama2-7b --prompt 128 --gen 64 --batch 64 \
    --graphs off 2>&1 | grep -E "profile|^\{" | tee -a $OUT/profile.txt
fi
# the generic path: $1 the pack, $2 HEADROOM_CUDA_ARCH_FALLBACK, $3 a name
generic() {
  local P=$1 tag=$3
  echo "== generic path ($tag): HEADROOM_CUDA_ARCH_FALLBACK=$2"
  (
    export HEADROOM_CUDA_ARCH_FALLBACK=$2 LD_LIBRARY_PATH=$P/lib:${LD_LIBRARY_PATH:-}
    $T 150 $P/attention_check 2>&1 | tee $OUT/attention_check_$tag.txt |
      grep -E "^device|FAIL|cases"
    $T 150 $P/test_backend_ops 2>&1 | tee $OUT/test_backend_ops_$tag.txt | tail -3
    $T 150 $P/test_cuda_model 2>&1 | tee $OUT/test_cuda_model_$tag.txt | tail -3
    $T 120 $P/test_bad_numbers 2>&1 | tee $OUT/test_bad_numbers_$tag.txt | tail -3
    $T 120 $P/headroom bench --device cuda --json --synthetic llama2-7b --prompt 128 \
      --gen 256 --repeat 3 2>&1 | tee $OUT/fallback_$tag.jsonl
  )
}
if [[ $what == *fallback* ]]; then
  generic $D 1 generic
  generic $D 86 generic86
fi
if [[ $what == *sm80* ]]; then
  generic $PWD/.dev/device-sm80 0 sm80
fi
if [[ $what == *sweep* ]]; then
  echo "== planner sweep: planned vs measured device memory"
  $T 150 $D/bench_plan_sweep $OUT/plan_sweep.jsonl | tail -1
fi
if [[ $what == *hf* ]]; then
  echo "== transformers, same shape"
  $T 150 python3 tools/hf_bench.py --shape llama2-7b --prompt 128 --gen 256 --attn eager,sdpa \
     --headroom-json $OUT/bench.jsonl 2>&1 | grep -v Warning | tee $OUT/hf.txt
fi
if [[ $what == *compiled* ]]; then
  echo "== transformers static cache + torch.compile (minutes of compilation)"
  $T 420 python3 tools/hf_bench.py --shape llama2-7b --prompt 128 --gen 256 --attn none \
     --compile --headroom-json $OUT/bench.jsonl 2>&1 | grep -v Warning | tee $OUT/hf_compiled.txt
fi
for f in bench packed ablate fallback_generic fallback_generic86 fallback_sm80; do
  [[ -f $OUT/$f.jsonl ]] || continue
  echo "-- $f"
  grep -h '^{' $OUT/$f.jsonl | python3 -c '
import json, sys
for l in sys.stdin:
    r = json.loads(l)
    pr, dr = r.get("prefill_tok_s_range", [0, 0]), r.get("decode_tok_s_range", [0, 0])
    print("%-5s%s %-5s %-5s %-6s %-3s %-4s b%-3d p%-6d g%-4d x%-2d ttft %7.2f ms  prefill %7.0f t/s"
          " (%.0f-%.0f)  decode %7.1f t/s (%.1f-%.1f)%s" % (
        r.get("weights", "-"), " exp" if r.get("expand") else "", r["dtype"], r["attn"],
        r["graphs"], r.get("overlap", "-"), r.get("norm_fold", "-"),
        r["batch"], r["prompt"],
        r["gen"],
        r.get("repeat", 1), r["ttft_ms"], r["prefill_tok_s"], pr[0], pr[1],
        r["decode_tok_s"], dr[0], dr[1],
        "  %.1f%% of %.1f (copy %.2f TB/s), %.1f%% of %.1f (read %.2f TB/s)" % (
            100 * r["decode_tok_s"] / r["decode_limit_tok_s"], r["decode_limit_tok_s"],
            r["copy_gb_s"] / 1e3, 100 * r["decode_tok_s"] / r["decode_read_limit_tok_s"],
            r["decode_read_limit_tok_s"], r["read_gb_s"] / 1e3)
        if r.get("decode_read_limit_tok_s") else ""))'
done
