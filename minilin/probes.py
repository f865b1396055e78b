"""Autograd probes: which inputs can an output position see?

Causality is a statement about derivatives: output t is causal when ∂ out[t] / ∂ x[s] = 0 for every s > t.
We measure that directly. Used to show that Linformer leaks the future (its sequence projection mixes all
positions) and that exact causal attention, causal FAVOR+ and the LMs do not.
"""
import torch


def influence_matrix(fn, x, *, seq_dim=1, generator=None):
    """I[t, s] = max over features of |∂ <w_t, out_t> / ∂ x_s|, an (N_out, N_in) tensor.

    fn: maps x (..., N, ...) to an output with a sequence axis at the same `seq_dim`.
    A random weighting w_t (from `generator`) replaces a plain sum so that no dependence cancels by
    symmetry (e.g. attention probabilities summing to one). One backward pass per output position.
    """
    x = x.detach().clone().requires_grad_(True)
    out = fn(x)
    if out.ndim <= seq_dim:
        raise ValueError(f"fn's output has shape {tuple(out.shape)}, no sequence axis at seq_dim={seq_dim}")
    w = torch.randn(out.shape, generator=generator, dtype=out.dtype, device="cpu").to(out.device)
    rows = []
    for t in range(out.shape[seq_dim]):
        target = (out.select(seq_dim, t) * w.select(seq_dim, t)).sum()
        (g,) = torch.autograd.grad(target, x, retain_graph=True, allow_unused=True)
        if g is None:
            g = torch.zeros_like(x)
        rows.append(g.abs().movedim(seq_dim, 0).flatten(1).amax(dim=1))  # (N_in,)
    return torch.stack(rows)  # (N_out, N_in)


def future_leakage(fn, x, *, seq_dim=1, generator=None):
    """Largest |∂ out_t / ∂ x_s| over s > t: exactly 0.0 for a causal fn, > 0 when the future leaks."""
    infl = influence_matrix(fn, x, seq_dim=seq_dim, generator=generator)
    n_out, n_in = infl.shape
    if n_out != n_in:
        raise ValueError(f"future_leakage needs as many outputs as inputs along seq_dim, got {n_out} and {n_in}")
    future = torch.triu(torch.ones(n_out, n_in, dtype=torch.bool, device=infl.device), diagonal=1)
    return float(infl[future].max()) if n_out > 1 else 0.0


class SuspectAttention(torch.nn.Module):
    """A one-head causal-looking attention layer, (B, N, dim) -> (B, N, dim), that may hide a fault: what Task 5.10
    tests without looking inside.

    Weights φ_q(q_t)·(e^{k_s - c_t} + eps) for the keys s it sees, φ_q = softmax over features, each row divided by
    its sum. stabiliser="running": c_t is the largest key entry among the keys t sees (causal: the future cannot
    reach the past). stabiliser="global": c is the largest entry over *all* positions, detached, as in
    performer-pytorch 1.1.4 (eps keeps it from cancelling: the future leaks, and no gradient shows it).
    see_chunk=C > 1: position t sees every key of its own chunk of C positions, later ones included (a causal mask
    applied per chunk, not per position: the future leaks inside each chunk).
    """

    def __init__(self, dim, *, stabiliser="running", see_chunk=1, eps=1e-4, generator=None, dtype=torch.float64):
        super().__init__()
        if stabiliser not in ("running", "global"):
            raise ValueError(f"stabiliser must be 'running' or 'global', got {stabiliser!r}")
        self.stabiliser, self.see_chunk, self.eps = stabiliser, int(see_chunk), float(eps)
        for name in ("w_q", "w_k", "w_v"):
            self.register_buffer(name, torch.randn(dim, dim, generator=generator, dtype=dtype) / dim ** 0.5)

    def forward(self, x):
        q, k, v = x @ self.w_q, x @ self.w_k, x @ self.w_v  # (B, N, dim) each
        n = x.shape[-2]
        t, s = torch.arange(n)[:, None], torch.arange(n)[None, :]
        sees = s < (t // self.see_chunk + 1) * self.see_chunk if self.see_chunk > 1 else s <= t  # (N, N)
        top = k.amax(-1)[..., None, :].expand(*k.shape[:-2], n, n)  # (B, N, N): the largest entry of key s
        if self.stabiliser == "global":
            c = k.detach().amax(dim=(-1, -2))[..., None, None, None]  # (B, 1, 1, 1): over all positions
        else:
            c = top.masked_fill(~sees, float("-inf")).amax(-1)[..., :, None, None]  # (B, N, 1, 1): what t sees
        feats = torch.exp(k[..., None, :, :] - c) + self.eps  # (B, N, N, dim): key s's features for query t
        w = torch.einsum("btf,btsf->bts", torch.softmax(q, dim=-1), feats)
        w = torch.where(sees, w, torch.zeros_like(w))  # (B, N, N)
        return (w @ v) / w.sum(-1, keepdim=True)
