#!/usr/bin/env python3
"""Train headroom's embedded default model on tinyshakespeare (GPU machine).

What it makes, in OUT_DIR (a Hugging Face folder LlamaForCausalLM loads):
  tokenizer.model          SentencePiece BPE, vocab 4096, byte fallback, trained
                           on the training split only
  tokenizer.json,
  tokenizer_config.json    the same tokenizer for transformers
  config.json, generation_config.json, model.safetensors (bf16)
  heldout.txt              the last 10% of the corpus, never trained on
  train_log.json           seed, steps, losses, time

The model is a small Llama: RMSNorm, RoPE, SwiGLU, grouped-query attention
(8 heads over 2 kv heads), untied output head, about 6.6M parameters.
Seeded, deterministic algorithms on: a rerun gives the same weights.

Usage: python3 tools/train_embedded.py CORPUS OUT_DIR [--steps N]
"""
import argparse
import json
import math
import os
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import sentencepiece as spm  # noqa: E402
import torch  # noqa: E402
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM  # noqa: E402
from transformers import LlamaTokenizer  # noqa: E402

SEED = 20261129
VOCAB = 4096
CTX = 512       # the model's context (max_position_embeddings)
TRAIN_CTX = 256  # training windows; shorter windows, more of them per step
DROPOUT = 0.2
LR = 1e-3


def split_corpus(text):
    cut = int(len(text) * 0.9)
    # cut at a line boundary so no line is split between the two
    cut = text.rfind("\n", 0, cut) + 1
    return text[:cut], text[cut:]


def train_tokenizer(train_text, out_dir):
    src = os.path.join(out_dir, "train_split.txt")
    with open(src, "w") as f:
        f.write(train_text)
    spm.SentencePieceTrainer.train(
        input=src, model_prefix=os.path.join(out_dir, "tokenizer"), model_type="bpe",
        vocab_size=VOCAB, byte_fallback=True, character_coverage=1.0,
        normalization_rule_name="identity", remove_extra_whitespaces=False,
        add_dummy_prefix=True, allow_whitespace_only_pieces=True, split_digits=True,
        max_sentence_length=1 << 20, split_by_whitespace=True,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, num_threads=8, seed_sentencepiece_size=1000000,
        train_extremely_large_corpus=False, input_sentence_size=0, shuffle_input_sentence=False)
    os.remove(src)
    os.remove(os.path.join(out_dir, "tokenizer.vocab"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus")
    ap.add_argument("out_dir")
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    t_start = time.time()

    text = open(args.corpus, encoding="utf-8").read()
    train_text, held = split_corpus(text)
    with open(os.path.join(args.out_dir, "heldout.txt"), "w") as f:
        f.write(held)
    train_tokenizer(train_text, args.out_dir)
    tok = LlamaTokenizer.from_pretrained(args.out_dir)
    tok.save_pretrained(args.out_dir)
    sp = spm.SentencePieceProcessor(model_file=os.path.join(args.out_dir, "tokenizer.model"))
    # train on one document: BOS then the whole training split, as sentencepiece encodes it
    train_ids = torch.tensor([1] + sp.encode(train_text), dtype=torch.long)
    held_ids = torch.tensor([1] + sp.encode(held), dtype=torch.long)

    torch.manual_seed(SEED)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    # intermediate 768 = 3 x 256: every matrix row divides into 32- and 256-element
    # quantization blocks, so the model converts to every GGUF type
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=256, intermediate_size=768,
                      num_hidden_layers=6, num_attention_heads=8, num_key_value_heads=2,
                      max_position_embeddings=CTX, rms_norm_eps=1e-5, rope_theta=10000.0,
                      tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
                      initializer_range=0.02, attention_dropout=0.0)
    dev = args.device
    # eager attention: the fused SDPA kernels' backward is not deterministic,
    # and a rerun must give the same weights
    cfg._attn_implementation = "eager"
    model = LlamaForCausalLM(cfg).to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    # ~300k training tokens overfit a 6M model within a few epochs: dropout on
    # each block's two residual branches, in training only (forward hooks, so
    # the saved model is a plain LlamaForCausalLM).
    def drop(module, inputs, output):
        return torch.nn.functional.dropout(output, DROPOUT, module.training)
    for layer in model.model.layers:
        layer.self_attn.o_proj.register_forward_hook(drop)
        layer.mlp.down_proj.register_forward_hook(drop)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.95), weight_decay=0.1)
    batch = 32
    gen = torch.Generator().manual_seed(SEED)
    train_ids_dev = train_ids.to(dev)
    warmup = 50
    log = []

    def lr_at(step):
        if step < warmup:
            return LR * (step + 1) / warmup
        p = (step - warmup) / max(1, args.steps - warmup)
        return LR / 10 + 0.5 * (LR - LR / 10) * (1 + math.cos(math.pi * p))

    def held_loss():
        model.eval()
        losses = []
        with torch.no_grad():
            for s in range(0, len(held_ids) - 1, CTX):
                x = held_ids[s:s + CTX].to(dev)[None]
                if x.shape[1] < 2:
                    break
                out = model(x, labels=x)
                losses.append((out.loss.item(), x.shape[1] - 1))
        model.train()
        return sum(l * n for l, n in losses) / sum(n for _, n in losses)

    best = (float("inf"), None, -1)
    model.train()
    for step in range(args.steps):
        starts = torch.randint(0, len(train_ids) - TRAIN_CTX - 1, (batch,), generator=gen)
        x = torch.stack([train_ids_dev[s:s + TRAIN_CTX] for s in starts.tolist()])
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        with torch.autocast(dev, dtype=torch.bfloat16):
            loss = model(x, labels=x).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 50 == 49 or step == args.steps - 1:
            hl = held_loss()
            log.append({"step": step + 1, "train_loss": loss.item(), "heldout_loss": hl,
                        "seconds": time.time() - t_start})
            print(json.dumps(log[-1]), flush=True)
            if hl < best[0]:
                best = (hl, {k: v.detach().clone() for k, v in model.state_dict().items()},
                        step + 1)
    # keep the checkpoint with the best held-out loss (early stopping)
    model.load_state_dict(best[1])
    model.to(torch.bfloat16).save_pretrained(args.out_dir, safe_serialization=True)
    GenerationConfig(bos_token_id=1, eos_token_id=2, do_sample=False).save_pretrained(
        args.out_dir)
    with open(os.path.join(args.out_dir, "train_log.json"), "w") as f:
        json.dump({"seed": SEED, "steps": args.steps, "best_step": best[2],
                   "heldout_loss_at_best": best[0], "n_params": n_params, "batch": batch,
                   "ctx": CTX, "train_ctx": TRAIN_CTX, "dropout": DROPOUT, "lr": LR,
                   "train_tokens": len(train_ids), "heldout_tokens": len(held_ids),
                   "seconds": time.time() - t_start, "torch": torch.__version__,
                   "device": torch.cuda.get_device_name() if dev == "cuda" else "cpu",
                   "log": log}, f, indent=1)
    print(f"done: {n_params} parameters, best held-out loss {best[0]:.4f} at step {best[2]}, "
          f"{time.time() - t_start:.0f} s")


if __name__ == "__main__":
    main()
