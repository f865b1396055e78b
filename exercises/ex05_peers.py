"""Exercises for notebook 05: efficient attention, moving weights between libraries, checking a claim.

Implement each function, then grade yourself:  python -m minilin grade --chapter 5
Shapes follow the course convention: q (B, H, N, D), k (B, H, M, D), v (B, H, M, Dv);
mask (B, M) bool with True = real token (a key padding mask).
Do not call minilin.efficient or minilin.peers here (you may read them once you are done).
"""
import torch


def efficient_attention(q, k, v, mask=None):
    """Task 5.1: Shen et al.'s efficient attention ρ_q(q) (ρ_k(k)ᵀ v), non-causal (arXiv 1812.01243, eq. 3).

    q: (B, H, N, D), k: (B, H, M, D), v: (B, H, M, Dv), mask: (B, M) bool or None  ->  (B, H, N, Dv)
    ρ_q: softmax of each query over its D features (dim -1).
    ρ_k: softmax of each key feature over the M positions (dim -2); padded keys must get weight 0, and a
         sequence with no real key at all must give zeros (not NaN).
    Never build an (N, M) matrix: multiply ρ_k(k)ᵀ v first, a (D, Dv) "context" per head.
    Hint: masked_fill the padded keys with -inf before the softmax over positions; a column that is all
    -inf has no finite max (see Task 1.2's stable_softmax).
    """
    raise NotImplementedError("Task 5.1")


def causal_efficient_attention(q, k, v, bucket_size=1):
    """Task 5.2: the causal variant of linear-attention-transformer 0.19.1, with prefix sums.

    q, k, v: (B, H, N, D), (B, H, N, D), (B, H, N, Dv)  ->  (B, H, N, Dv);  no mask; N == M.
    Features φ_q = softmax(q) over features, φ_k = exp(k). Query i sees the keys j in `visible(i)` and
    out_i = Σ_j (φ_q(q_i)·φ_k(k_j)) v_j / Σ_j φ_q(q_i)·φ_k(k_j)
    bucket_size 1: visible(i) = {j <= i}. bucket_size B > 1: positions form buckets of B and query i sees only
    keys in buckets strictly before its own: j < (i // B) * B (a query in the first bucket sees nothing: 0).
    Use prefix sums (torch.cumsum) of φ_k(k_j) v_jᵀ (B, H, N, D, Dv) and of φ_k(k_j) (B, H, N, D), not an
    (N, N) matrix. Inputs are O(1) here, so exp(k) needs no stabiliser (minilin's version has one).
    """
    raise NotImplementedError("Task 5.2")


def transplant_into_lat(ours, lat):
    """Task 5.3: copy our EfficientSelfAttention's weights into a linear-attention-transformer SelfAttention.

    ours: minilin.efficient.EfficientSelfAttention(dim, heads) (no q/k/v bias)
    lat:  linear_attention_transformer.linear_attention_transformer.SelfAttention(dim, heads), non-causal,
          same dim and heads, random weights.  Returns lat, modified in place, such that
          lat(x) == ours(x) for every x (B, N, dim).
    Read its `linear_attn`: it multiplies the softmaxed queries by D**-0.5 (D = head dim), so its output
    before to_out is ours times D**-0.5. Fold the missing factor into its to_out weight.
    Hint: inside `with torch.no_grad():` use `lat.to_q.weight.copy_(...)`.
    """
    raise NotImplementedError("Task 5.3")


def linformer_into_ours(theirs, ours):
    """Task 5.4: copy a `linformer` 0.2.3 LinformerSelfAttention's weights into our LinformerSelfAttention.

    theirs: linformer.LinformerSelfAttention(dim, seq_len, k, heads) (share_kv=False, one_kv_head=False)
    ours:   minilin.linformer.LinformerSelfAttention(dim, heads, seq_len, k, sharing="headwise")
    Returns ours, modified in place, such that ours(x) == theirs(x) for x (B, N, dim), N <= seq_len.
    Their proj_k, proj_v are (seq_len, k) and project with einsum('bnd,nk->bkd'); our E, F are (k, seq_len)
    and project with E @ keys. Their to_q, to_k, to_v, to_out map to ours by name.
    """
    raise NotImplementedError("Task 5.4")


def block_flops(batch, n, dim, *, proj_len=None, ff_mult=4):
    """Task 5.5: FLOPs of one forward pass of a pre-norm Transformer block, counted from first principles.

    The block is minilin.model.Block: x + attn(LN(x)), then x + MLP(LN(x)) with MLP = Linear(dim, ff_mult·dim),
    GELU, Linear(ff_mult·dim, dim). attn: exact attention when proj_len is None, else Linformer projecting
    the n keys and values to proj_len positions (E @ K, F @ V; the paper calls proj_len k). Count as torch.utils.flop_counter.FlopCounterMode does:
    a matrix product (a×b)@(b×c) costs 2·a·b·c FLOPs; LayerNorm, softmax, GELU, bias adds cost 0.
    The answer does not depend on the number of heads (why?). Return a Python int.
    """
    raise NotImplementedError("Task 5.5")
