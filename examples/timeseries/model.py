"""A small causal transformer that predicts the next value of a series. Its attention is a
function with torch.nn.functional.scaled_dot_product_attention's signature, so the same model
runs on PyTorch's SDPA or on flashjit.torch.scaled_dot_product_attention."""
from typing import Callable

import torch
from torch import nn

Attention = Callable[..., torch.Tensor]


class Block(nn.Module):
    def __init__(self, width: int, heads: int, attention: Attention):
        super().__init__()
        self.heads, self.attention = heads, attention
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.out = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, w = x.shape
        # [batch, seqlen, 3, heads, head_dim] -> three [batch, heads, seqlen, head_dim] views
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, w // self.heads).permute(2, 0, 3, 1, 4)
        o = self.attention(q, k, v, is_causal=True)
        x = x + self.out(o.transpose(1, 2).reshape(b, s, w))
        return x + self.mlp(self.norm2(x))


class SeriesTransformer(nn.Module):
    def __init__(self, attention: Attention, layers: int = 4, heads: int = 12, head_dim: int = 64,
                 features: int = 5):
        super().__init__()
        width = heads * head_dim
        self.embed = nn.Linear(features, width)
        self.blocks = nn.ModuleList(Block(width, heads, attention) for _ in range(layers))
        self.norm, self.head = nn.LayerNorm(width), nn.Linear(width, 1)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        x = self.embed(features)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))[..., 0]
