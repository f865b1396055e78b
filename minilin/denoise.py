"""A small bidirectional model trained in a few minutes on a CPU: denoising a smooth signal (notebooks 02 and 03).

Each input is x_t = y_t + noise·ε_t for t < n, with y a random sum of `freqs` low-frequency sinusoids (unit
variance) and ε white noise; the model must output y. The trivial baseline (output the input unchanged) scores
noise² in mean squared error, so a model that beats it clearly has learned to average neighbours.

The model: a linear embedding of each sample, fixed sinusoidal position features, `layers` pre-LayerNorm blocks
around any attention module built by `make_attention(dim, heads)` (exact, Linformer, ...), a linear read-out.
One definition, so notebook 02 (spectra of trained attention) and notebook 03 (exact against Linformer) train the
same thing and differ only in the arguments they pass.
"""
import math
from typing import NamedTuple

import torch
from torch import nn

from minilin.attention import attention_matrix

TEST_SEED = 12345   # the fixed generator of the 256 held-out signals every run is scored on


def smooth_signal_batch(batch, n, generator, freqs=4, noise=0.5):
    """(noisy, clean), each (batch, n): clean is a sum of `freqs` sinusoids of frequencies 1..freqs per window
    with random amplitude and phase, scaled to unit variance; noisy = clean + noise · N(0, 1)."""
    t = torch.arange(n) / n
    f = torch.arange(1, freqs + 1)[None, :, None]
    amp = torch.randn(batch, freqs, 1, generator=generator) / math.sqrt(freqs)
    phase = torch.rand(batch, freqs, 1, generator=generator) * 2 * math.pi
    clean = (amp * torch.sin(2 * math.pi * f * t + phase)).sum(1) * math.sqrt(2)   # (batch, n), unit variance
    return clean + noise * torch.randn(batch, n, generator=generator), clean


class Block(nn.Module):
    """Pre-LayerNorm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, dim, attn):
        super().__init__()
        self.ln1, self.attn, self.ln2 = nn.LayerNorm(dim), attn, nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Denoiser(nn.Module):
    """(B, n) noisy signal -> (B, n, dim) -> `layers` blocks -> (B, n) estimate of the clean signal.

    make_attention(dim, heads) builds each block's attention (a `MultiHeadSelfAttention` or a subclass).
    """

    def __init__(self, n, make_attention, dim=32, heads=4, layers=2):
        super().__init__()
        self.inp = nn.Linear(1, dim)
        ang = 2 * math.pi * torch.arange(n)[:, None] * torch.arange(1, dim // 2 + 1)[None, :] / (2 * n)
        self.register_buffer("pos", torch.cat([ang.sin(), ang.cos()], dim=-1))   # (n, dim), fixed
        self.blocks = nn.ModuleList(Block(dim, make_attention(dim, heads)) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(dim), nn.Linear(dim, 1)

    def embed(self, x):
        if x.ndim != 2 or x.shape[1] > self.pos.shape[0]:
            raise ValueError(f"Denoiser expects a (batch, n) signal with n <= {self.pos.shape[0]}, got shape "
                             f"{tuple(x.shape)}; build the model with a larger n")
        return self.inp(x[..., None]) + self.pos[: x.shape[1]]

    def forward(self, x):
        h = self.embed(x)
        for block in self.blocks:
            h = block(h)
        return self.head(self.ln(h))[..., 0]

    @torch.no_grad()
    def attention_maps(self, x):
        """The (B, H, n, n) softmax attention matrix of every layer, from that layer's q and k (exact attention)."""
        maps, h = [], self.embed(x)
        for block in self.blocks:
            z, a = block.ln1(h), block.attn
            maps.append(attention_matrix(a.split_heads(a.to_q(z)), a.split_heads(a.to_k(z))))
            h = block(h)
        return maps


class DenoiserRun(NamedTuple):
    model: Denoiser
    losses: list        # training MSE at every step
    test_mse: float     # MSE on 256 held-out signals (generator seeded with TEST_SEED)


def held_out_mse(model, n, *, device="cpu", noise=0.5):
    """The model's MSE on the fixed 256 held-out signals (the same for every run and every model)."""
    x, y = (t.to(device) for t in smooth_signal_batch(256, n, torch.Generator().manual_seed(TEST_SEED),
                                                       noise=noise))
    with torch.no_grad():
        return (model(x) - y).square().mean().item()


def train_denoiser(make_attention, *, n=128, steps=300, batch=32, lr=1e-2, layers=2, seed=0, device="cpu"):
    """Train a Denoiser with AdamW; `seed` fixes the initialisation and the data order. Returns a DenoiserRun."""
    if steps < 1 or batch < 1:
        raise ValueError(f"steps and batch must be >= 1, got steps={steps}, batch={batch}")
    torch.manual_seed(seed)
    data = torch.Generator().manual_seed(seed)
    model = Denoiser(n, make_attention, layers=layers).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        x, y = (t.to(device) for t in smooth_signal_batch(batch, n, data))
        loss = (model(x) - y).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return DenoiserRun(model, losses, held_out_mse(model, n, device=device))
