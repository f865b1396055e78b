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
         sequence with no real key at all must give zeros (not NaN). Large keys must not overflow.
    Never build an (N, M) matrix.

    Hints, one tier at a time (notebook 05, section 3):
      1. The two softmaxes run over different axes. How does a softmax give a padded key a weight of exactly 0?
         And what does it return for a column in which every entry is -inf (see Task 1.2's stable_softmax)?
      2. Plan: turn mask (B, M) into (B, 1, M, 1) and hide the padded keys; ρ_k over dim -2 is (B, H, M, D),
         made safe for all-padded columns; the "context" ρ_k(k)ᵀ v is (B, H, D, Dv), one per head; ρ_q over
         dim -1 is (B, H, N, D); ρ_q times the context gives (B, H, N, Dv). Multiply in that order.
      3. Formula: padded keys become -inf. For each feature, subtract the largest key over the positions (use
         0 where that largest value is not finite), exponentiate, and divide by the column's sum (use 1 where
         the sum is 0): that is ρ_k. The output is the softmax of q over its features, times (ρ_kᵀ v).
    """
    raise NotImplementedError("Task 5.1")


def causal_efficient_attention(q, k, v, bucket_size=1):
    """Task 5.2: the causal variant of linear-attention-transformer 0.19.1, with prefix sums.

    q, k, v: (B, H, N, D), (B, H, N, D), (B, H, N, Dv)  ->  (B, H, N, Dv);  no mask; N == M.
    Features φ_q = softmax(q) over features, φ_k = exp(k). Query i sees the keys j in `visible(i)` and
    out_i = Σ_j (φ_q(q_i)·φ_k(k_j)) v_j / Σ_j φ_q(q_i)·φ_k(k_j)
    bucket_size 1: visible(i) = {j <= i}. bucket_size B > 1: positions form buckets of B and query i sees only
    keys in buckets strictly before its own: j < (i // B) * B (a query in the first bucket sees nothing: 0).
    Use prefix sums (torch.cumsum), not an (N, N) matrix. Inputs are O(1) here, so exp(k) needs no stabiliser
    (minilin's version has one).

    Hints, one tier at a time (notebook 05, section 3, "The causal variant", and section 2, "Causal"):
      1. Both sums run over a *prefix* of the keys, in both modes. Which prefix does query i use when
         bucket_size is 1, and which when it is B > 1? (Careful: bucket_size 1 is not the B > 1 rule with
         B = 1, which would hide each query's own key.)
      2. Plan: φ_q and φ_k are (B, H, N, D). Prefix sums over positions of φ_k(k_j) v_jᵀ give (B, H, N, D, Dv)
         and of φ_k(k_j) give (B, H, N, D). For each query, the index of its last visible key (-1: none) is a
         length-N index tensor; pick those prefix rows, contract them with φ_q over D to get a numerator
         (B, H, N, Dv) and a denominator (B, H, N), divide, and set the queries that see nothing to 0.
      3. In formulas: S_j = Σ_{l ≤ j} φ_k(k_l) v_lᵀ and z_j = Σ_{l ≤ j} φ_k(k_l) (running sums over positions);
         query i's last visible key is ℓ(i) = i when bucket_size is 1, and ℓ(i) = ⌊i/B⌋·B − 1 otherwise;
         out_i = φ_q(q_i)ᵀ S_ℓ(i) / φ_q(q_i)ᵀ z_ℓ(i) where ℓ(i) ≥ 0, and 0 where ℓ(i) = −1 (read a clamped
         index, then zero those rows).
    """
    raise NotImplementedError("Task 5.2")


def transplant_into_lat(ours, lat):
    """Task 5.3: copy our EfficientSelfAttention's weights into a linear-attention-transformer SelfAttention.

    ours: minilin.efficient.EfficientSelfAttention(dim, heads) (no q/k/v bias)
    lat:  linear_attention_transformer.linear_attention_transformer.SelfAttention(dim, heads), non-causal,
          same dim and heads, random weights.  Returns lat, modified in place, such that
          lat(x) == ours(x) for every x (B, N, dim).
    Read its `linear_attn`: it multiplies the softmaxed queries by D**-0.5 (D = head dim), so its output
    before to_out is ours times D**-0.5.

    Hints, one tier at a time (notebook 05, section 4):
      1. Both modules have to_q, to_k, to_v and to_out of the same shapes. If the input to their to_out is ours
         times a constant c, how can to_out undo that constant? Does to_out's bias see it?
      2. Plan: without recording gradients, copy the three input projections' weights as they are; set their
         to_out weight to ours times 1/c = √D (D = ours.dim_head); copy the to_out bias unchanged; return lat.
      3. In formulas: W_q, W_k, W_v (theirs) = W_q, W_k, W_v (ours); W_out (theirs) = √D · W_out (ours), since
         W_out · (c·h) = (c·W_out) · h; b_out (theirs) = b_out (ours), since the bias is added after the
         product and never sees c. Copy in place, with gradients off.
    """
    raise NotImplementedError("Task 5.3")


def linformer_into_ours(theirs, ours):
    """Task 5.4: copy a `linformer` 0.2.3 LinformerSelfAttention's weights into our LinformerSelfAttention.

    theirs: linformer.LinformerSelfAttention(dim, seq_len, k, heads) (share_kv=False, one_kv_head=False)
    ours:   minilin.linformer.LinformerSelfAttention(dim, heads, seq_len, k, sharing="headwise")
    Returns ours, modified in place, such that ours(x) == theirs(x) for x (B, N, dim), N <= seq_len.
    Their proj_k, proj_v are (seq_len, k) and project with einsum('bnd,nk->bkd'); our E, F are (k, seq_len)
    and project with E @ keys. Their to_q, to_k, to_v, to_out map to ours by name.

    Hints, one tier at a time (notebook 05, section 4):
      1. Write both projections as a sum over the positions n: slot j gets Σ_n (their matrix)[n, j] · key_n,
         and Σ_n E[j, n] · key_n. How must E relate to their proj_k for these to be equal?
      2. Plan: without recording gradients, copy the four Linear layers by name (weights, and to_out's bias
         too); E gets proj_k rearranged to (k, seq_len), F gets proj_v the same way; return ours. Shorter
         inputs need no extra work: both sides then use the first N positions of their matrices.
      3. In formulas: E[j, n] = proj_k[n, j] and F[j, n] = proj_v[n, j] (each is the other's transpose); every
         weight and bias of the four linear layers equal, name for name. Copy in place, with gradients off.
    """
    raise NotImplementedError("Task 5.4")


def block_flops(batch, n, dim, *, proj_len=None, ff_mult=4):
    """Task 5.5: FLOPs of one forward pass of a pre-norm Transformer block, counted from first principles.

    The block is minilin.model.Block: x + attn(LN(x)), then x + MLP(LN(x)) with MLP = Linear(dim, ff_mult·dim),
    GELU, Linear(ff_mult·dim, dim). attn: exact attention when proj_len is None, else Linformer projecting
    the n keys and values to proj_len positions (E @ K, F @ V; the paper calls proj_len k). Count as
    torch.utils.flop_counter.FlopCounterMode does:
    a matrix product (a×b)@(b×c) costs 2·a·b·c FLOPs; LayerNorm, softmax, GELU, bias adds cost 0.
    The answer does not depend on the number of heads (why?). Return a Python int.

    Hints, one tier at a time (notebook 05, section 6 g, "Numeric claims, recomputed"):
      1. List every matrix product in the block, then count each with 2·a·b·c. For the heads: H heads of width
         dim / H each do a product whose cost is proportional to their width; what is the sum over heads?
      2. Plan, per sequence (then times batch): four projections q, k, v, out, each (n × dim) @ (dim × dim);
         two MLP products, (n × dim) @ (dim × ff_mult·dim) and back. Exact attention, per head: scores
         (n × Dh) @ (Dh × n) and mixing (n × n) @ (n × Dh). Linformer, per head: E @ K and F @ V, each
         (k × n) @ (n × Dh), then scores (n × Dh) @ (Dh × k) and mixing (n × k) @ (k × Dh). Sum over the heads
         with H · Dh = dim.
      3. 8·batch·n·dim² + 4·batch·n·dim·(ff_mult·dim), plus 4·batch·n²·dim for exact attention or
         8·batch·n·proj_len·dim for Linformer. At ff_mult = 4 and batch 1 that is the notebook's
         24·n·d² + 4·n²·d (exact) and 24·n·d² + 8·n·k·d (Linformer).
    """
    raise NotImplementedError("Task 5.5")
