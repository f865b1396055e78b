"""Exercises for notebook 06: memory and time.

Implement each function, then grade yourself:  python -m minilin grade --chapter 6
Tasks 6.1-6.3 and 6.5 are formulas (the core is 6.3 and 6.4; 6.1, 6.2 and 6.5 are optional): each returns a number
computed from sizes alone, and the grader
compares it with what minilin.bench's meters count when minilin's own code runs on meta tensors (notebook 06, section 4;
for 6.5, FlopCounterMode's count of a blocked causal loop).
Task 6.4 computes attention's gradients itself (torch only). Sizes: batch B, heads H, N queries, M (or n) keys and values, head
dimension D, value dimension Dv, `itemsize` bytes per number (8 for float64, 4 for float32, 2 for bfloat16).
Do not call minilin here.

Each task has three hints, from a nudge to the formula in words. Read one, try, and read the next only if you are stuck.
"""


def exact_saved_bytes(B, H, N, M, D, Dv, itemsize):
    """Task 6.1 (optional, a warm-up: the listing of section 2 in your own words): the bytes autograd keeps for the
    backward pass of exact attention, softmax(q kᵀ / √D) v.

    q: (B, H, N, D), k: (B, H, M, D), v: (B, H, M, Dv), no mask, not causal  ->  an int (bytes).
    Notebook 06 (section 2) listed what exact attention saves for N = M and D = Dv in float32; here
    queries and keys may differ in number, values in width, and the dtype in size. Storages are counted once each.

    Hint 1 (nudge): list what each of the two products and the softmax needs to compute its gradient, and count
        each tensor once even if two operations keep it.
    Hint 2 (plan): reread section 2's listing: which saved tensor's shape involves the number of queries
        and the number of keys together, and which are the inputs? Rewrite each listed shape with N, M, D and Dv.
    Hint 3 (formula): in words, count the entries of each distinct saved tensor, add them, and turn entries into
        bytes.
    """
    raise NotImplementedError("Task 6.1")


def linformer_saved_bytes(B, H, N, n, D, Dv, k, itemsize, shared):
    """Task 6.2 (optional): the bytes autograd keeps for backward of Linformer attention softmax(q (E K)ᵀ / √D) (F V).

    q: (B, H, N, D), K: (B, H, n, D), V: (B, H, n, Dv); E, F: fixed (k, n) projections shared by the heads (no
    gradient for them), used at their full length n; `shared` True means E and F are one and the same tensor
    (Linformer's key-value sharing, notebook 03's appendix on sharing). Returns an int (bytes).
    Extends notebook 06, section 2 (what backward keeps) to Linformer, whose saved bytes the notebook does not
    derive; the grader measures minilin.linformer.

    Hint 1 (nudge): there are three matrix products now. For each, which factor is needed to get the gradient of
        the other factor, knowing that E and F need no gradient but K and V do?
    Hint 2 (plan): for each product and the softmax, write down which tensors it keeps and their shapes; then
        say which of them have a copy per batch element and head and which are stored once for all heads.
    Hint 3 (formula): in words, add the entries of each distinct kept tensor (per batch element and head where it
        has them, once where the heads share it; one storage when E = F), and turn entries into bytes.
    """
    raise NotImplementedError("Task 6.2")


def flop_crossover(method, dim_head, size=None):
    """Task 6.3: the shortest length n at which `method` counts fewer forward FLOPs than exact attention.

    method: "performer" (FAVOR+, `size` = m random features), "linear" (elu+1, `size` unused) or "linformer"
    (`size` = k projected positions); dim_head: D  ->  an int n >= 2, self-attention (N = M = n), counted as
    FlopCounterMode counts them (matrix products only). Raise ValueError for any other method.
    The products are minilin's: FAVOR+ maps q and k with its (m, D) projection; FAVOR+ and elu+1 get their
    normaliser from the values' product by appending a column of ones to v (D + 1 columns); Linformer projects K
    and V with (k, n) matrices. The grader checks your n with minilin.bench.model_case at n and at n - 1.

    Hint 1 (nudge): per head, exact attention counts a multiple of n², each linear method a multiple of n. Where is
        one below the other?
    Hint 2 (plan): list the matrix products of each method and the shapes of their factors, count each
        product's FLOPs, and compare the per-head totals of the method and of exact attention as n grows.
    Hint 3 (formula): in words, the comparison reduces to n against one number that depends on the method and
        D; take care where the two counts are equal, since the task asks for strictly fewer.
    """
    raise NotImplementedError("Task 6.3")


def blocked_attention_backward(q, k, v, out, lse, dout, block):
    """Task 6.4: the backward pass of exact attention, one block of keys at a time, from the saved log-sum-exp.

    q: (B, H, N, D), k: (B, H, M, D), v: (B, H, M, Dv); out = softmax(q kᵀ / √D) v, (B, H, N, Dv), and lse, (B, H, N),
    each query's log-sum-exp of its scores: what a fused kernel keeps from its forward pass (notebook 06, section 3).
    dout: (B, H, N, Dv), the gradient of the loss with respect to out. block: how many keys per step (the last
    block may be shorter; block >= M means one block). No mask.  ->  (dq, dk, dv) with the shapes of q, k and v,
    the gradients autograd would give. Use torch only (no autograd, not minilin, not F.scaled_dot_product_attention).
    The grader compares with autograd through minilin.attention.softmax_attention on fresh inputs (also with scores
    large enough to overflow exp), and measures the bytes your function holds at once (every tensor it makes, until
    it is freed): with small blocks they must stay below half of the (N, M) score matrices.

    Hint 1 (nudge): section 3 checked that the probabilities of a row are exp(score - lse) for that row: one block
        of keys gives back its own columns of P without the others. Which gradients belong to one block of keys
        alone, and which collect a part from every block?
    Hint 2 (plan): before the loop, one number per query from dout and out (the softmax's gradient needs it). Then
        for each block of keys: its scores and probabilities; the block's gradients of the values and of the keys
        are its own, written once; the gradient of the queries gets this block's share added.
    Hint 3 (formula): in words: out = P V, so the values' gradient is P transposed times dout and P's gradient is
        dout times V transposed; notebook 06's Check yourself 3 turns a row's gradient of P into its score gradients
        with one number per query that needs no other block; the scores are Q Kᵀ scaled by 1/√D, so their gradient
        reaches Q and K by the same product rule, each with that scale.
    """
    raise NotImplementedError("Task 6.4")


def causal_block_work(n, q_block, kv_block):
    """Task 6.5 (predict, then measure; optional): the share of the N x N work a blocked causal kernel computes.

    A causal attention kernel cuts the queries into blocks of q_block and the keys into blocks of kv_block (the last
    ones may be shorter) and computes a whole (query block, key block) tile whenever at least one of its keys is
    visible to one of its queries (key index <= query index), masking inside it; tiles wholly above the diagonal are
    skipped.  ->  a float: the number of score entries it computes divided by n².
    Notebook 06 predicted and measured (Appendix A) SDPA's causal CPU kernel, which cuts keys into blocks of 512;
    here both block sizes are yours. Before you code it, predict on paper the share for n = 1536 with tiles of 256 x 512 and
    for tiles of 512 x 256, then let the grader measure: it runs such a blocked loop on meta tensors under
    FlopCounterMode and divides by the count of the full product.

    Hint 1 (nudge): tiles are computed whole. For one block of queries, which key blocks does it need?
    Hint 2 (plan): loop over the query blocks; for each, work out which key blocks its queries need, and add up
        the entries the block computes.
    Hint 3 (formula): check your count on a case by hand: n = 8 with tiles of 2 queries x 4 keys computes 48 of
        the 64 entries, a share of 0.75; draw the 8 x 8 grid, shade the tiles, and make your loop give the same.
    """
    raise NotImplementedError("Task 6.5")
