"""A small GPT-style decoder (pre-LayerNorm blocks, causal SDPA, GELU MLP) with
deterministic weights: the default model of ``mma-emu preview``.  No downloads.

Its products reach a dispatch mode as ``addmm`` (the Linear layers, on (B*T, d) rows),
``mm`` (the bias-free LM head) and the fused attention kernel.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["GPTConfig", "TinyGPT", "tiny_gpt"]


@dataclass(frozen=True)
class GPTConfig:
    vocab: int = 256
    seq: int = 32
    d_model: int = 64
    n_head: int = 4
    n_layer: int = 2
    d_ff: int = 256


class Attention(nn.Module):
    def __init__(self, c: GPTConfig):
        super().__init__()
        self.n_head = c.n_head
        self.qkv = nn.Linear(c.d_model, 3 * c.d_model)
        self.proj = nn.Linear(c.d_model, c.d_model)

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_head, D // self.n_head).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(B, T, D))


class Block(nn.Module):
    def __init__(self, c: GPTConfig):
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(c.d_model), Attention(c)
        self.ln2 = nn.LayerNorm(c.d_model)
        self.mlp = nn.Sequential(nn.Linear(c.d_model, c.d_ff), nn.GELU(),
                                 nn.Linear(c.d_ff, c.d_model))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    """Token ids (B, T) -> logits (B, T, vocab)."""

    def __init__(self, c: GPTConfig):
        super().__init__()
        self.config = c
        self.tok = nn.Embedding(c.vocab, c.d_model)
        self.pos = nn.Embedding(c.seq, c.d_model)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.n_layer))
        self.ln_f = nn.LayerNorm(c.d_model)
        self.head = nn.Linear(c.d_model, c.vocab, bias=False)

    def forward(self, idx):
        T = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(T, device=idx.device))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln_f(x))

    def preview_layers(self) -> list[str]:
        """Modules whose outputs the preview compares, in order (the logits come last)."""
        return [f"blocks.{i}" for i in range(len(self.blocks))] + ["ln_f"]

    def example_inputs(self, batch: int, seed: int = 0) -> torch.Tensor:
        g = torch.Generator().manual_seed(seed)
        return torch.randint(0, self.config.vocab, (batch, self.config.seq), generator=g)


def tiny_gpt(seed: int = 0, **config) -> TinyGPT:
    """A TinyGPT with weights drawn from ``seed`` (PyTorch's default initialisation, the
    global RNG left untouched); ``config`` overrides :class:`GPTConfig` fields."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = TinyGPT(GPTConfig(**config))
    return model.eval()
