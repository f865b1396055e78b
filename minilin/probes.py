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
