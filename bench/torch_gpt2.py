#!/usr/bin/env python3
"""GPT-2 124M training step in plain PyTorch: what a user would run instead of dtrain.

nanoGPT's model (tied head, learned positions, pre-LayerNorm blocks, GELU(tanh), SDPA with
is_causal), vocabulary 50304, B=16, T=1024, bf16 autocast, fused AdamW (lr 6e-4, weight decay
0.1), random tokens already on the GPU. Warms up, times `--steps` steps between CUDA events, and
prints one JSON line:

  {"case": "gpt2", "mode": "eager"|"compile"|..., "tokens_per_s": ..., "ms_per_step": ...,
   "mfu": ..., "peak_mem_gb": ..., ...}

MFU counts 6 * N flops per token for the weights (N excludes the position embedding, as
nanoGPT does) plus 12 * n_layer * n_embd * T for attention, against the H200's dense bf16 peak
of 989.5 TFLOP/s.

The loss is computed inside the model's forward, under autocast, as nanoGPT writes it; with
`--compile` the whole module that returns the loss is compiled (logits and cross-entropy inside
the compiled region): the strongest PyTorch a user would write. `--loss-outside` keeps the older
variant (the model returns logits, the loss is taken on `logits.float()` outside), as an extra row.

  python3 bench/torch_gpt2.py             # eager
  python3 bench/torch_gpt2.py --compile   # torch.compile
  python3 bench/torch_gpt2.py --profile gpt2.json   # and a trace of 5 more steps
"""
import argparse
import json
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from _common import add_profile_args, device_name, peak_mem_gb, profile_steps, time_steps

H200_BF16_DENSE_FLOPS = 989.5e12


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, H, T, D)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        if hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # PyTorch < 2.0 (only for a smoke test on old CPU installs)
            att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            y = att.masked_fill(~mask, float("-inf")).softmax(-1) @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, n_embd):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.c_proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = MLP(n_embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    def __init__(self, vocab, seq_len, n_layer, n_head, n_embd):
        super().__init__()
        self.wte = nn.Embedding(vocab, n_embd)
        self.wpe = nn.Embedding(seq_len, n_embd)
        self.h = nn.ModuleList([Block(n_embd, n_head) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

    @staticmethod
    def _init_weights(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        B, T = idx.size()
        pos = torch.arange(T, dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))  # (B, T, V)
        if targets is None:
            return logits
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--loss-outside", action="store_true",
                    help="the model returns logits; the loss is taken on logits.float() outside")
    ap.add_argument("--fp32", action="store_true", help="no autocast: float32 (TF32 matmuls)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--n-layer", type=int, default=12)
    ap.add_argument("--n-head", type=int, default=12)
    ap.add_argument("--n-embd", type=int, default=768)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    add_profile_args(ap)
    args = ap.parse_args()

    torch.manual_seed(0)
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    model = GPT(args.vocab, args.seq, args.n_layer, args.n_head, args.n_embd).to(dev)
    n_params = sum(p.numel() for p in model.parameters())  # the tied head counts once
    n_flop_params = n_params - model.wpe.weight.numel()
    try:
        opt = torch.optim.AdamW(model.parameters(), lr=6e-4, weight_decay=0.1, fused=True)
        fused = True
    except (TypeError, RuntimeError):
        opt = torch.optim.AdamW(model.parameters(), lr=6e-4, weight_decay=0.1)
        fused = False
    step_model = torch.compile(model) if args.compile else model

    x = torch.randint(0, args.vocab, (args.batch, args.seq), device=dev)
    y = torch.randint(0, args.vocab, (args.batch, args.seq), device=dev)

    def step():
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=not args.fp32):
            if args.loss_outside:
                logits = step_model(x)
            else:
                loss = step_model(x, y)
        if args.loss_outside:
            loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), y.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    loss, warmup_s, elapsed = time_steps(step, args.warmup, args.steps, dev)
    tokens = args.batch * args.seq * args.steps
    tokens_per_s = tokens / elapsed
    flops_per_token = 6 * n_flop_params + 12 * args.n_layer * args.n_embd * args.seq
    # llm.c's count: 6 flops per weight (all of them) and 6 * L * C * T for attention.
    flops_per_token_llmc = 6 * n_params + 6 * args.n_layer * args.n_embd * args.seq
    result = {
        "case": "gpt2",
        "mode": ("compile" if args.compile else "eager") + ("_fp32" if args.fp32 else "")
                + ("_loss_outside" if args.loss_outside else ""),
        "tokens_per_s": round(tokens_per_s, 1),
        "ms_per_step": round(1e3 * elapsed / args.steps, 3),
        "mfu": round(flops_per_token * tokens_per_s / H200_BF16_DENSE_FLOPS, 4),
        "mfu_llmc": round(flops_per_token_llmc * tokens_per_s / H200_BF16_DENSE_FLOPS, 4),
        "peak_mem_gb": peak_mem_gb(dev),
        "params": n_params,
        "batch": args.batch, "seq": args.seq, "steps": args.steps, "warmup_s": round(warmup_s, 2),
        "fused_adamw": fused, "final_loss": round(loss.item(), 4),
        "device": device_name(dev),
        "torch": torch.__version__,
    }
    if args.profile:
        result["profile"] = profile_steps(step, args.profile_steps, dev, args.profile)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
