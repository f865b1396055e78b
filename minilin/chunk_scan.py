"""The chunk-to-chunk states of a chunked causal scan, with no Python loop over chunks.

`minilin.linear` (causal linear attention, with or without a per-feature exponential map) and `minilin.gated`
(retention and scalar gates) hand their per-chunk writes to `chunk_states`; the tests are in tests/test_linear.py.
"""
import torch


def _segsum(x):
    """seg[..., i, j] = Σ_{j < d ≤ i} x_d for j ≤ i, −inf above the diagonal: (..., T) -> (..., T, T).

    Each entry sums only its own terms (a masked cumulative sum, as Mamba-2's `ssd_minimal.py` segsum,
    arXiv 2405.21060), so exp(seg) is exact to rounding even when Σ_d x_d over the whole row is large."""
    T = x.shape[-1]
    rows = x[..., :, None].expand(*x.shape, T)  # rows[..., d, j] = x_d
    below = torch.ones(T, T, dtype=torch.bool, device=x.device).tril(-1)  # d > j
    seg = rows.masked_fill(~below, 0.0).cumsum(dim=-2)
    return seg.masked_fill(~below.logical_or(torch.eye(T, dtype=torch.bool, device=x.device)), float("-inf"))


def chunk_states(writes, log_decay=None, initial_state=None):
    """The chunk-to-chunk states of a chunked scan, with no Python loop over chunks.

        S_t = exp(log_decay_t) S_{t−1} + writes_t,   S_{−1} = initial_state (or 0),   t = 0..n−1

    writes: (B, H, n, F, E), chunk t's contribution already on the scale of its end; log_decay: (B, H, n) ≤ 0
    (one scalar per head and chunk) or None (no decay: a cumulative sum); initial_state: (B, H, F, E) or None.
    returns (before, final): before (B, H, n, F, E), the state each chunk starts from (S_{t−1}); final
    (B, H, F, E), the state after the last chunk.

    With a decay, a two-level scan: the chunks are grouped in blocks of s ≈ (2n)^(1/3); inside a block the
    states are one (s × s) matrix of factors exp(Σ log_decay) ≤ 1 times the writes, across blocks one
    (n/s × n/s) matrix times the blocks' totals (every exponent ≤ 0: nothing overflows). Work O(n^(4/3)·F·E),
    memory O(n·(s + F·E)): never an (n × n × F × E) tensor, and a fixed number of operations whatever n.
    A non-finite write reaches exactly the states after its chunk (NaN; 0·NaN in the matrix products would
    otherwise reach earlier ones). Chunk t's state never depends on chunk t's own writes, not even by rounding.
    """
    B, H, n = writes.shape[:3]
    flat = writes.reshape(B, H, n, -1)  # (B, H, n, X), X = F·E
    X = flat.shape[-1]
    start = flat.new_zeros(B, H, 1, X) if initial_state is None else \
        initial_state.reshape(B, H, 1, X).to(flat.dtype)
    if n == 0:
        return writes.clone(), start.reshape(B, H, *writes.shape[3:])
    if log_decay is None:
        after = flat.cumsum(dim=2)  # sequential, as the loop it replaces
        after = after if initial_state is None else after + start
        before = torch.cat([start, after[:, :, :-1]], dim=2)
        return before.view(writes.shape), after[:, :, -1].reshape(B, H, *writes.shape[3:])
    # one sum tells whether any write is non-finite (inf or NaN, or an overflow: then the guard is a no-op)
    guard = writes.device.type != "meta" and not bool(torch.isfinite(flat.sum()))
    if guard:
        bad = ~torch.isfinite(flat)
        flat = torch.where(bad, torch.zeros_like(flat), flat)
    s = 1
    while s ** 3 < 2 * n:  # s ≈ (2n)^(1/3) minimises the two levels' work n·s + (n/s)² per state entry
        s += 1
    nb = -(-n // s)
    pad = nb * s - n
    la = log_decay.to(flat.dtype)
    if pad:  # padded chunks write nothing and keep the state (log decay 0)
        flat = torch.nn.functional.pad(flat, (0, 0, 0, pad))
        la = torch.nn.functional.pad(la, (0, pad))
    w, la = flat.view(B, H, nb, s, X), la.view(B, H, nb, s)
    seg = _segsum(la)  # (B, H, nb, s, s): [t, j] = Σ_{j < d ≤ t} la_d
    strict = torch.cat([torch.full_like(seg[..., :1, :], float("-inf")), seg[..., :-1, :]], dim=-2)  # [t−1, j]
    local = torch.exp(strict) @ w  # (B, H, nb, s, X): the state before each chunk of a block, from a zero start
    total = torch.exp(seg[..., -1:, :]) @ w  # (B, H, nb, 1, X): a block's writes at its end
    block_log = la.sum(-1)  # (B, H, nb): a block's total log decay
    into = torch.cat([la.new_zeros(B, H, 1), block_log[:, :, :-1]], dim=2)  # the log decay into block b
    items = torch.cat([start, total[:, :, :-1, 0]], dim=2)  # (B, H, nb, X): what enters block b
    enter = torch.exp(_segsum(into)) @ items  # (B, H, nb, X): the state entering each block
    reach = torch.exp(la.cumsum(-1) - la)[..., None]  # (B, H, nb, s, 1): block start to chunk t's start, ≤ 1
    before = torch.addcmul(local, reach, enter[:, :, :, None]).view(B, H, nb * s, X)[:, :, :n]
    final = torch.addcmul(total[:, :, -1, 0], torch.exp(block_log[:, :, -1:]), enter[:, :, -1])  # (B, H, X)
    if guard:
        reached = torch.cummax(bad.int(), dim=2).values.bool()  # at and after a bad write
        reached = torch.cat([torch.zeros_like(reached[:, :, :1]), reached[:, :, :-1]], dim=2)  # after it
        before = torch.where(reached, torch.full_like(before, float("nan")), before)
        final = torch.where(bad.any(dim=2), torch.full_like(final, float("nan")), final)
    return before.reshape(writes.shape), final.reshape(B, H, *writes.shape[3:])
