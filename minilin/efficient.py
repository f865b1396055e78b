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

from minilin.attention import MultiHeadSelfAttention, check_attention_inputs


def visible_counts(n, m, *, causal=False, bucket_size=None, device=None):
    """How many keys (a prefix 0..c-1) each of the N queries may see: a (N,) long tensor.

    Non-causal: all M. Causal: query i sits at key position p = i + (M - N) (bottom-right alignment) and
    sees p + 1 keys; with bucket_size B > 1 it sees the floor(p / B) · B keys of the buckets before its own.
    """
    if not causal:
        return torch.full((n,), m, dtype=torch.long, device=device)
    p = torch.arange(n, device=device) + (m - n)  # key position of query i
    counts = p + 1 if bucket_size in (None, 1) else torch.div(p, bucket_size, rounding_mode="floor") * bucket_size
    return counts.clamp(0, m)


def _check_bucket_chunk(bucket_size, chunk_size):
    if bucket_size is not None and (not isinstance(bucket_size, int) or bucket_size < 1):
        raise ValueError(f"bucket_size must be None or a positive int (1 = plain causal), got {bucket_size!r}")
    if not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive int (queries per step of the causal scan), got {chunk_size!r}")


def key_softmax(k, mask=None):
    """ρ_k: softmax of k over the key positions (dim -2), per feature; padded keys get 0; no real key -> 0.

    k: (B, H, M, D), mask: (B, M) bool True = real token -> (B, H, M, D), each column sums to 1 (or is 0).
    """
    if mask is None:
        return torch.softmax(k, dim=-2)
    k = k.masked_fill(~mask[:, None, :, None], float("-inf"))
    top = k.amax(dim=-2, keepdim=True)
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))  # all padded: exp(-inf) = 0 below
    e = torch.exp(k - top.detach())  # the max cancels in e / total; detached so it adds no gradient path
    total = e.sum(dim=-2, keepdim=True)
    return e / torch.where(total > 0, total, torch.ones_like(total))


def efficient_attention(q, k, v, *, mask=None, causal=False, bucket_size=None, chunk_size=64):
    """Efficient attention ρ_q(q) (ρ_k(k)ᵀ v), Shen et al. arXiv 1812.01243 eq. (3); causal: see module doc.

    q: (B, H, N, D)   k: (B, H, M, D)   v: (B, H, M, Dv)   mask: (B, M) bool, True = real token
    bucket_size: causal only; None/1 = plain causal, B > 1 = the bucketed variant of linear-attention-transformer.
    chunk_size: queries per step of the causal scan (memory O(chunk·M_chunk) per step, never N×M).
    returns (B, H, N, Dv)
    """
    check_attention_inputs(q, k, v, mask)
    _check_bucket_chunk(bucket_size, chunk_size)
    if bucket_size not in (None, 1) and not causal:
        raise ValueError("bucket_size only applies to causal=True (the non-causal form sees every key); drop it")
    if causal:
        return _causal_efficient_attention(q, k, v, mask, bucket_size, chunk_size)
    context = key_softmax(k, mask).transpose(-2, -1) @ v  # (B, H, D, Dv): D global context vectors
    return torch.softmax(q, dim=-1) @ context  # (B, H, N, Dv)


def _causal_efficient_attention(q, k, v, mask, bucket_size, chunk_size):
    """The causal kernel as a chunked scan that is exact, causal to the last bit, and cannot overflow.

    exp(k) overflows (float32: k > 88), so every weight is computed as exp(k_jd - r_i) with r_i the largest
    key feature query i may see: a common factor of numerator and denominator, so it cancels exactly. r_i
    must not look at keys query i cannot see (a max over all positions leaks the future, see notebook 05), so
    it is a running maximum: the state (S = Σ exp(k_j - ref) v_jᵀ, z = Σ exp(k_j - ref)) is rescaled when ref
    grows, and inside a chunk each query takes the max over its own visible keys. The maxima are detached:
    the output does not depend on them, so their gradient is exactly zero anyway.
    """
    B, H, N, D = q.shape
    M, Dv = k.shape[2], v.shape[-1]
    neg_inf = float("-inf")
    phi_q = torch.softmax(q, dim=-1)  # (B, H, N, D); LAT's extra D^-1/2 factor cancels in the ratio
    top = k.detach().amax(dim=-1)  # (B, H, M) largest feature of each key
    if mask is not None:
        top = top.masked_fill(~mask[:, None, :], neg_inf)
    logits = k - torch.where(torch.isfinite(top), top, torch.zeros_like(top)).unsqueeze(-1)
    if mask is not None:
        logits = logits.masked_fill(~mask[:, None, :, None], neg_inf)
    phi_k = torch.exp(logits)  # (B, H, M, D) = exp(k_j - top_j) <= 1; padded keys 0

    def safe(t):
        return torch.where(torch.isfinite(t), t, torch.zeros_like(t))

    counts = visible_counts(N, M, causal=True, bucket_size=bucket_size).tolist()
    S = q.new_zeros(B, H, D, Dv)  # Σ exp(k_j - ref) v_jᵀ over the absorbed keys
    z = q.new_zeros(B, H, D)  # Σ exp(k_j - ref)
    ref = q.new_full((B, H), neg_inf)  # running max of the absorbed keys (-inf: none yet)
    absorbed = 0
    outs = []
    for i0 in range(0, N, chunk_size):
        i1 = min(i0 + chunk_size, N)
        lo, hi = counts[i0], counts[i1 - 1]  # every query of the chunk sees keys < lo; some see up to hi
        if lo > absorbed:  # keys [absorbed, lo) are visible to all queries from here on: add to the state
            t = top[..., absorbed:lo]  # (B, H, L)
            new_ref = torch.maximum(ref, t.amax(dim=-1))
            decay = torch.exp(ref - safe(new_ref))  # 0 while ref = -inf (empty state)
            w = torch.exp(t - safe(new_ref).unsqueeze(-1))  # (B, H, L), 0 for padded keys
            kk = phi_k[..., absorbed:lo, :] * w.unsqueeze(-1)  # exp(k_j - new_ref)
            S = decay[..., None, None] * S + kk.transpose(-2, -1) @ v[..., absorbed:lo, :]  # (B, H, D, Dv)
            z = decay.unsqueeze(-1) * z + kk.sum(dim=-2)
            ref, absorbed = new_ref, lo
        pq = phi_q[:, :, i0:i1]  # (B, H, C, D)
        if hi > lo:  # keys [lo, hi): query i sees the first counts[i] - lo of them
            seen = torch.arange(lo, hi)[None, :] < torch.tensor(counts[i0:i1])[:, None]  # (C, L)
            t = top[..., lo:hi].unsqueeze(-2).masked_fill(~seen.to(q.device), neg_inf)  # (B, H, C, L)
            r = torch.maximum(ref.unsqueeze(-1), t.amax(dim=-1))  # (B, H, C) max over what query i sees
            w = (pq @ phi_k[..., lo:hi, :].transpose(-2, -1)) * torch.exp(t - safe(r).unsqueeze(-1))
            num_local, den_local = w @ v[..., lo:hi, :], w.sum(dim=-1)  # (B, H, C, Dv), (B, H, C)
        else:
            r = ref.unsqueeze(-1).expand(B, H, i1 - i0)
            num_local, den_local = 0.0, 0.0
        s = torch.exp(ref.unsqueeze(-1) - safe(r))  # (B, H, C) rescales the state to exp(. - r_i)
        num = s.unsqueeze(-1) * (pq @ S) + num_local  # (B, H, C, Dv)
        den = s * (pq @ z.unsqueeze(-1)).squeeze(-1) + den_local  # (B, H, C)
        outs.append(num / torch.where(den > 0, den, torch.ones_like(den)).unsqueeze(-1))  # no key -> 0
    return torch.cat(outs, dim=2)  # (B, H, N, Dv)


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


class EfficientSelfAttention(MultiHeadSelfAttention):
    """Multi-head self-attention whose mixing step is `efficient_attention` (Shen et al., arXiv 1812.01243).

    x (B, N, dim) -> (B, N, dim). Same projections as `MultiHeadSelfAttention` (to_q, to_k, to_v, to_out), so
    weights move between variants with load_state_dict. bucket_size: the causal bucketed variant (None = plain).
    """

    def __init__(self, dim, heads=8, dim_head=None, dropout=0.0, bias=False, bucket_size=None, chunk_size=64):
        super().__init__(dim, heads=heads, dim_head=dim_head, dropout=dropout, bias=bias)
        _check_bucket_chunk(bucket_size, chunk_size)
        self.bucket_size, self.chunk_size = bucket_size, chunk_size

    def mix(self, q, k, v, *, mask=None, causal=False):
        return efficient_attention(q, k, v, mask=mask, causal=causal,
                                   bucket_size=self.bucket_size if causal else None, chunk_size=self.chunk_size)
