"""Efficient attention: Shen et al., "Efficient Attention: Attention with Linear Complexities", arXiv 1812.01243.

Exact attention normalises each row of q kᵀ over the keys, so it needs the (N, M) score matrix. Efficient
attention normalises q and k *separately* (eq. (3) of the paper):

    ρ_q(q) = softmax over each query's D features      (every query becomes a distribution over features)
    ρ_k(k) = softmax over the M key positions, per feature   (every feature becomes a distribution over keys)
    E(q, k, v) = ρ_q(q) (ρ_k(k)ᵀ v)                          (B, H, N, D) @ (B, H, D, Dv): O(N·D·Dv), no N×M

Read as an attention matrix, A = ρ_q(q) ρ_k(k)ᵀ is (N, M) with non-negative rows that sum to one: query i
mixes D "global context vectors" (the rows of ρ_k(k)ᵀ v) with its own feature weights. This is what the
global heads of `linear-attention-transformer` 0.19.1 compute (its `linear_attn`, up to a constant factor
D^-1/2 on the output, see `minilin.peers`).

Causal. Shen et al. define only the non-causal form: a softmax over key positions needs every key. The
causal form here is the one `linear-attention-transformer` uses (its `causal_linear_attn`): linear
attention (Katharopoulos et al., arXiv 2006.16236) with feature maps φ_q = softmax over features and
φ_k = exp, one normaliser per query:

    out_i = Σ_{j visible} (φ_q(q_i)·exp(k_j)) v_j  /  Σ_{j visible} φ_q(q_i)·exp(k_j)

It is a different kernel, not a masked copy of the non-causal one (each feature is no longer normalised
over the keys on its own), so with causal=True the last query does NOT reproduce the non-causal output.
`bucket_size=B > 1` is the library's bucketed ("blindspot") variant: keys are grouped in buckets of B
positions and a query sees only keys in buckets strictly before its own bucket, itself included in the
blind spot; bucket_size None (or 1) is plain causal, j <= i.

Mask, causal alignment (bottom-right) and fully-masked rows follow `minilin.attention`: padded keys get no
weight, a query that sees no key outputs zeros, never NaN.
"""
import torch

from minilin.attention import check_attention_inputs
from minilin.linear import (EfficientPair, LinearSelfAttention, _compute_dtype, global_linear_attention,
                            linear_attention, visible_counts)

EFFICIENT = EfficientPair()


def _check_bucket_chunk(bucket_size, chunk_size):
    if bucket_size is not None and (not isinstance(bucket_size, int) or bucket_size < 1):
        raise ValueError(f"bucket_size must be None or a positive int (1 = plain causal), got {bucket_size!r}")
    if not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive int (queries per step of the causal scan), got {chunk_size!r}")


def key_softmax(k, mask=None):
    """ρ_k: softmax of k over the key positions (dim -2), per feature; padded keys get 0; no real key -> 0.

    k: (B, H, M, D), mask: (B, M) bool True = real token -> (B, H, M, D), each column sums to 1 (or is 0).
    """
    if mask is not None:
        k = k.masked_fill(~mask[:, None, :, None], float("-inf"))
    p = torch.softmax(k, dim=-2)
    return torch.where(torch.isnan(p) & (k == float("-inf")), torch.zeros_like(p), p)  # all padded: 0, not NaN


def efficient_attention(q, k, v, *, mask=None, causal=False, bucket_size=None, chunk_size=64):
    """Efficient attention ρ_q(q) (ρ_k(k)ᵀ v), Shen et al. arXiv 1812.01243 eq. (3); causal: see module doc.

    q: (B, H, N, D)   k: (B, H, M, D)   v: (B, H, M, Dv)   mask: (B, M) bool, True = real token
    bucket_size: causal only; None/1 = plain causal, B > 1 = the bucketed variant of linear-attention-transformer.
    chunk_size: positions per step of the causal scan (memory O(chunk²) per step, never N×M).
    returns (B, H, N, Dv). Non-causal: `minilin.linear.global_linear_attention` on ρ_q(q) and `key_softmax(k)`
    (both ≤ 1, so nothing overflows); causal: `minilin.linear.linear_attention` with the `EfficientPair` maps.
    float16/bfloat16 are computed in float32 and cast back.
    """
    check_attention_inputs(q, k, v, mask)
    _check_bucket_chunk(bucket_size, chunk_size)
    if causal:
        return linear_attention(q, k, v, feature_map=EFFICIENT, mask=mask, causal=True, chunk_size=chunk_size,
                                bucket_size=bucket_size)
    if bucket_size not in (None, 1):
        raise ValueError("bucket_size only applies to causal=True (the non-causal form sees every key); drop it")
    out_dtype, dtype = q.dtype, _compute_dtype(q)
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    B, H, N, _ = q.shape
    if N == 0 or k.shape[2] == 0:
        return q.new_zeros(B, H, N, v.shape[-1]).to(out_dtype)
    return global_linear_attention(torch.softmax(q, dim=-1), key_softmax(k, mask), v).to(out_dtype)


def efficient_attention_loops(q, k, v, *, mask=None, causal=False, bucket_size=None):
    """The readable specification: plain loops over batch, head, query, key and feature.

    Same contract as `efficient_attention`; slow (O(B·H·N·M·D) Python steps), for small tests only.
    Weights stay tensors so gradients flow through the spec as well.
    """
    check_attention_inputs(q, k, v, mask)
    _check_bucket_chunk(bucket_size, 1)
    B, H, N, D = q.shape
    M = k.shape[2]
    counts = visible_counts(N, M, causal=causal, bucket_size=bucket_size).tolist()
    rows = []
    for b in range(B):
        for h in range(H):
            for i in range(N):
                visible = [j for j in range(counts[i]) if mask is None or bool(mask[b, j])]
                out_i = torch.zeros(v.shape[-1], dtype=v.dtype, device=v.device)
                if visible:  # a query that sees no key outputs zeros
                    top_q = q[b, h, i].detach().max()
                    eq = [torch.exp(q[b, h, i, d] - top_q) for d in range(D)]
                    rho_q = [e / sum(eq) for e in eq]  # softmax over the query's features
                    if not causal:  # per feature d: softmax over the visible key positions
                        weights = []
                        for j in visible:
                            w = 0.0
                            for d in range(D):
                                top = max(k[b, h, jj, d].detach() for jj in visible)
                                col = sum(torch.exp(k[b, h, jj, d] - top) for jj in visible)
                                w = w + rho_q[d] * torch.exp(k[b, h, j, d] - top) / col
                            weights.append(w)
                    else:  # one normaliser per query; the common max cancels in w / total
                        top = max(k[b, h, j, d].detach() for j in visible for d in range(D))
                        raw = [sum(rho_q[d] * torch.exp(k[b, h, j, d] - top) for d in range(D)) for j in visible]
                        weights = [w / sum(raw) for w in raw]
                    for w, j in zip(weights, visible):
                        out_i = out_i + w * v[b, h, j]
                rows.append(out_i)
    return torch.stack(rows).view(B, H, N, v.shape[-1])


class EfficientSelfAttention(LinearSelfAttention):
    """Multi-head self-attention whose mixing step is `efficient_attention` (Shen et al., arXiv 1812.01243).

    x (B, N, dim) -> (B, N, dim). Same projections as every MultiHeadSelfAttention (to_q, to_k, to_v, to_out),
    so weights move between variants with load_state_dict. bucket_size: the causal bucketed variant (None =
    plain causal), which has no recurrent form (`step` raises).
    """

    def __init__(self, dim, heads=8, *, dim_head=None, dropout=0.0, bias=False, bucket_size=None, chunk_size=64):
        _check_bucket_chunk(bucket_size, chunk_size)
        super().__init__(dim, heads, feature_map=EFFICIENT, dim_head=dim_head, dropout=dropout, bias=bias,
                         chunk_size=chunk_size)
        self.bucket_size = bucket_size
        self.recurrent = bucket_size in (None, 1)

    def mix(self, q, k, v, *, mask=None, causal=False):
        return efficient_attention(q, k, v, mask=mask, causal=causal,
                                   bucket_size=self.bucket_size if causal else None, chunk_size=self.chunk_size)

    def step(self, x_t, state=None):
        if not self.recurrent:
            raise NotImplementedError(f"bucket_size={self.bucket_size} hides each query's own bucket, which a "
                                      "one-token recurrence cannot do; decode with forward(x, causal=True)")
        return super().step(x_t, state)


def fit_previous_token(n, d, *, steps=400, lr=0.1, seed=0):
    """Q, K (1, 1, n, d) float64, trained by Adam so that non-causal efficient attention copies the previous token.

    Maximises the mean of A[i, i-1] over i = 1..n-1, A = ρ_q(Q) ρ_k(K)ᵀ, from standard normal Q, K (seed `seed`).
    That mean is at most d/(n-1) for any Q, K (the d distributions of ρ_k(K) hold one target's weight each); a few
    hundred steps reach it.
    """
    g = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(n, d, generator=g, dtype=torch.float64).requires_grad_() for _ in range(2))
    opt = torch.optim.Adam([q, k], lr=lr)
    for _ in range(steps):
        loss = -(torch.softmax(q, -1) @ key_softmax(k[None, None])[0, 0].T).diagonal(-1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return q.detach()[None, None], k.detach()[None, None]
