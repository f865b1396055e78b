"""Exercises for notebook 06: memory and time.

Implement each function, then grade yourself:  python -m minilin grade --chapter 6
These are formulas: each function returns a Python int computed from shapes alone, and the grader compares it with
what minilin.bench's meters count when minilin's own attention runs on the meta device (notebook 06, section 3).
Sizes: batch B, heads H, N queries, M (or n) keys and values, head dimension D, value dimension Dv, `itemsize`
bytes per number (8 for float64, 4 for float32, 2 for bfloat16). Do not call minilin here.

Each task has three hints, from a nudge to the formula. Read one, try, and read the next only if you are stuck.
"""


def exact_saved_bytes(B, H, N, M, D, Dv, itemsize):
    """Task 6.1: the bytes autograd keeps for the backward pass of exact attention, softmax(q kᵀ / √D) v.

    q: (B, H, N, D), k: (B, H, M, D), v: (B, H, M, Dv), no mask, not causal  ->  an int (bytes).
    Revisits notebook 06, sections 2-3, which derived this count for N = M and D = Dv in float32; here queries and
    keys may differ in number, values in width, and the dtype in size. Storages are counted once each.

    Hint 1 (nudge): list what each of the two products and the softmax needs to compute its gradient, and count
        each tensor once even if two operations keep it.
    Hint 2 (plan): one tensor grows with N times M; the others are the inputs themselves. Add their numbers of
        entries, then multiply by the bytes per number.
    Hint 3 (formula): bytes = itemsize · B · H · (N·M + N·D + M·D + M·Dv): the (N, M) probabilities, q, k and v.
    """
    raise NotImplementedError("Task 6.1")


def linformer_saved_bytes(B, H, N, n, D, Dv, k, itemsize, shared):
    """Task 6.2: the bytes autograd keeps for backward of Linformer attention softmax(q (E K)ᵀ / √D) (F V).

    q: (B, H, N, D), K: (B, H, n, D), V: (B, H, n, Dv); E, F: fixed (k, n) projections shared by the heads (no
    gradient for them), used at their full length n; `shared` True means E and F are one and the same tensor
    (Linformer's key-value sharing, notebook 03, section 6). Returns an int (bytes).
    Extends notebook 06, section 2 (what backward keeps) to Linformer, whose saved bytes the notebook does not
    derive (section 8 only compares forward peaks and FLOPs); the grader measures minilin.linformer.

    Hint 1 (nudge): there are three matrix products now. For each, which factor is needed to get the gradient of
        the other factor, knowing that E and F need no gradient but K and V do?
    Hint 2 (plan): the probabilities (now N by k), the queries, the two projected tensors, and the projections
        themselves: one storage per distinct tensor, so E = F is kept once.
    Hint 3 (formula): bytes = itemsize · (B·H·(N·k + N·D + k·D + k·Dv) + c·k·n), with c = 1 when E is F and 2
        otherwise. The keys and values themselves are not kept: the product with E needs only E for their gradient.
    """
    raise NotImplementedError("Task 6.2")


def flop_crossover(method, dim_head, size=None):
    """Task 6.3: the shortest length n at which `method` counts fewer forward FLOPs than exact attention.

    method: "performer" (FAVOR+, `size` = m random features), "linear" (elu+1, `size` unused) or "linformer"
    (`size` = k projected positions); dim_head: D  ->  an int n >= 2, self-attention (N = M = n), counted as
    FlopCounterMode counts them (matrix products only). Raise ValueError for any other method.
    Extends notebook 06, sections 7-8, which derived each method's counted FLOPs but not where they cross exact
    attention's; the grader checks your n with minilin.bench.model_case at n and at n - 1.

    Hint 1 (nudge): per head, exact attention counts a multiple of n², each linear method a multiple of n. Where is
        one below the other?
    Hint 2 (plan): write each method's count per head as c · n (c from notebook 06: the projection and the two
        products of FAVOR+, the two products of elu+1 with its ones column, Linformer's E K, F V and attention),
        solve c · n < 4 n² D, and return the smallest integer that satisfies the strict inequality.
    Hint 3 (formula): n = ⌊c / (4 D)⌋ + 1 with c = 4 D m + 4 m (D + 1) for FAVOR+, c = 4 D (D + 1) for elu+1 and
        c = 8 k D for Linformer; when c / (4 D) is a whole number the counts are equal there, not yet below.
    """
    raise NotImplementedError("Task 6.3")
