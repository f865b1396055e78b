"""Planted wrong answers for chapters 5 and 7 that the checks must fail (the MUTANTS pattern of test_exercises.py).

Each mutant is plausible: right on the notebook's one shape, or right in value but quadratic, or a transcription
of a notebook cell where an extend task asks for a new case.
"""
import importlib.util

import pytest
import torch

from minilin.grading.checks import CannotGrade
from minilin.grading.course import TASKS
from minilin.grading.runner import run_in_process

pytestmark = pytest.mark.usefixtures("one_thread")

SAVE = """import os
import torch
def save_checkpoint(obj, path):  # right: a temporary file, then os.replace
    tmp = path + ".tmp"
    try:
        torch.save(obj, tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
"""
ELU = "import torch\nphi = lambda x: torch.nn.functional.elu(x) + 1\n"
CLAMP = """import math
import torch
def clamp_onset(q, k, bucket_size=1):  # the smallest prefix denominator over the queries in `rows`
    n, d = q.shape[-2:]
    i = torch.arange(n)
    last = i if bucket_size == 1 else (i // bucket_size) * bucket_size - 1
    last = last[last >= 0]
    den = (torch.softmax(q, -1)[:, :, -len(last):] * torch.exp(k).cumsum(2)[:, :, last])[:, :, {rows}].sum(-1)
    return math.log(1e-3 * {factor}) - math.log(den.min().item())
"""

MUTANTS = {
    # id: (task, function name, code)
    "5.1-quadratic": ("5.1", "efficient_attention", """import torch
def efficient_attention(q, k, v, mask=None):  # right values through an (N, M) weight matrix
    if mask is not None:
        k = k.masked_fill(~mask[:, None, :, None], float("-inf"))
    rho_k = torch.softmax(k, dim=-2).nan_to_num(0.0)
    return (torch.softmax(q, dim=-1) @ rho_k.transpose(-2, -1)) @ v
"""),
    "5.1-unstabilised": ("5.1", "efficient_attention", """import torch
def efficient_attention(q, k, v, mask=None):  # exp(k) with no max subtracted: overflows for large keys
    e = torch.exp(k) if mask is None else torch.exp(k) * mask[:, None, :, None]
    total = e.sum(dim=-2, keepdim=True)
    rho_k = e / torch.where(total > 0, total, torch.ones_like(total))
    return torch.softmax(q, dim=-1) @ (rho_k.transpose(-2, -1) @ v)
"""),
    "5.1-notebook-cell": ("5.1", "efficient_attention", """import torch
def efficient_attention(q, k, v, mask=None):  # notebook 05, section 2's unmasked kernel: mask= ignored
    return q.softmax(dim=-1) @ (k.softmax(dim=-2).transpose(-2, -1) @ v)
"""),
    "5.2-quadratic": ("5.2", "causal_efficient_attention", """import torch
def causal_efficient_attention(q, k, v):  # the masked (N, N) form
    a = (torch.softmax(q, -1) @ torch.exp(k).transpose(-2, -1)).tril()
    return a @ v / a.sum(-1, keepdim=True)
"""),
    "5.2-total-sums": ("5.2", "causal_efficient_attention", """import torch
def causal_efficient_attention(q, k, v):  # linear cost, but the sums run over every key: the future leaks
    phi_q, phi_k = torch.softmax(q, -1), torch.exp(k)
    num = phi_q @ (phi_k.transpose(-2, -1) @ v)
    return num / (phi_q * phi_k.sum(-2, keepdim=True)).sum(-1, keepdim=True)
"""),
    "5.2-blind-spot-of-one": ("5.2", "causal_efficient_attention", """import torch
def causal_efficient_attention(q, k, v):  # the bucket rule with B = 1: each query misses its own key
    phi_q, phi_k = torch.softmax(q, -1), torch.exp(k)
    kv = torch.einsum("bhnd,bhne->bhnde", phi_k, v).cumsum(2) - torch.einsum("bhnd,bhne->bhnde", phi_k, v)
    ks = phi_k.cumsum(2) - phi_k
    den = torch.einsum("bhnd,bhnd->bhn", phi_q, ks)[..., None]
    num = torch.einsum("bhnd,bhnde->bhne", phi_q, kv)
    return torch.where(den > 0, num / torch.where(den > 0, den, torch.ones_like(den)), torch.zeros_like(num))
"""),
    "5.3-fixed-root": ("5.3", "transplant_into_lat", """import torch
def transplant_into_lat(ours, lat, causal=False):  # √8: right only for the notebook's head dimension
    with torch.no_grad():
        for name in ("to_q", "to_k", "to_v"):
            getattr(lat, name).weight.copy_(getattr(ours, name).weight)
        lat.to_out.weight.copy_(ours.to_out.weight * (1.0 if causal else 8 ** 0.5))
        lat.to_out.bias.copy_(ours.to_out.bias)
    return lat
"""),
    "5.3-dim-over-heads": ("5.3", "transplant_into_lat", """import torch
def transplant_into_lat(ours, lat, causal=False):  # √(dim / heads): right only when the head dim is dim / heads
    with torch.no_grad():
        for name in ("to_q", "to_k", "to_v"):
            getattr(lat, name).weight.copy_(getattr(ours, name).weight)
        lat.to_out.weight.copy_(ours.to_out.weight * (1.0 if causal else (ours.dim / ours.heads) ** 0.5))
        lat.to_out.bias.copy_(ours.to_out.bias)
    return lat
"""),
    "5.3-always-rescale": ("5.3", "transplant_into_lat", """import torch
def transplant_into_lat(ours, lat, causal=False):  # √D also for causal layers, whose constant cancels
    with torch.no_grad():
        for name in ("to_q", "to_k", "to_v"):
            getattr(lat, name).weight.copy_(getattr(ours, name).weight)
        lat.to_out.weight.copy_(ours.to_out.weight * ours.dim_head ** 0.5)
        lat.to_out.bias.copy_(ours.to_out.bias)
    return lat
"""),
    "5.3-no-rescale": ("5.3", "transplant_into_lat", """
def transplant_into_lat(ours, lat, causal=False):  # every weight copied, never rescaled
    lat.load_state_dict(ours.state_dict(), strict=False)
    return lat
"""),
    "5.3-package-adapter": ("5.3", "transplant_into_lat", """from minilin.peers import lat_self_attention_from_ours
def transplant_into_lat(ours, lat, causal=False):  # right values, from the package's adapter: refused
    lat.load_state_dict(lat_self_attention_from_ours(ours, causal=causal).state_dict())
    return lat
"""),
    "5.6-no-mask": ("5.6", "chunked_causal_linear_attention", ELU + """
def chunked_causal_linear_attention(q, k, v, chunk_size, mask=None):  # padding ignored
    a = (phi(q) @ phi(k).transpose(-2, -1)).tril()
    return a @ v / a.sum(-1, keepdim=True)
"""),
    "5.6-notebook-cell": ("5.6", "chunked_causal_linear_attention", ELU + """
def chunked_causal_linear_attention(q, k, v, chunk_size, mask=None):  # notebook 07's causal_linear_mix, masked
    fk = phi(k) if mask is None else phi(k) * mask[:, None, :, None]
    a = (phi(q) @ fk.transpose(-2, -1)).tril()
    den = a.sum(-1, keepdim=True)
    return torch.where(den > 0, a @ v / torch.where(den > 0, den, torch.ones_like(den)), torch.zeros_like(den))
"""),
    "5.6-whole-chunk": ("5.6", "chunked_causal_linear_attention", ELU + """
def chunked_causal_linear_attention(q, k, v, chunk_size, mask=None):  # no tril inside a chunk: the future leaks
    fq, fk = phi(q), phi(k) if mask is None else phi(k) * mask[:, None, :, None]
    S, z, outs = 0, 0, []
    for s in range(0, q.shape[2], chunk_size):
        a, b, c = fq[:, :, s:s + chunk_size], fk[:, :, s:s + chunk_size], v[:, :, s:s + chunk_size]
        S, z = S + b.transpose(-2, -1) @ c, z + b.sum(-2)
        outs.append(a @ S / (a * z[:, :, None]).sum(-1, keepdim=True))
    return torch.cat(outs, dim=2)
"""),
    # Task 5.10: a gradient probe (blind to a detached maximum), a small redraw of the future as in the notebook's
    # cell (moves no maximum of the past), a change that starts one position early, a comparison that includes t0
    "5.10-gradient-probe": ("5.10", "past_changes", """import torch
def past_changes(layer, x):
    n = x.shape[1]
    out = torch.zeros(n, dtype=torch.float64)
    for t0 in range(1, n):
        xg = x.clone().requires_grad_()
        (g,) = torch.autograd.grad(layer(xg)[:, :t0].sum(), xg)
        out[t0] = g[:, t0:].abs().max()
    return out
"""),
    "5.10-small-redraw": ("5.10", "past_changes", """import torch
def past_changes(layer, x):
    n = x.shape[1]
    out = torch.zeros(n, dtype=torch.float64)
    with torch.no_grad():
        for t0 in range(1, n):
            x2 = x.clone()
            x2[:, t0:] = 2 * torch.randn(x2[:, t0:].shape, generator=torch.Generator().manual_seed(96), dtype=x.dtype)
            out[t0] = (layer(x2)[:, :t0] - layer(x)[:, :t0]).abs().max()
    return out
"""),
    "5.10-one-early": ("5.10", "past_changes", """import torch
def past_changes(layer, x):
    n = x.shape[1]
    out = torch.zeros(n, dtype=torch.float64)
    with torch.no_grad():
        for t0 in range(1, n):
            for f in (10.0, -10.0):
                x2 = x.clone()
                x2[:, t0 - 1:] *= f
                out[t0] = max(out[t0], (layer(x2)[:, :t0] - layer(x)[:, :t0]).abs().max())
    return out
"""),
    "5.10-through-t0": ("5.10", "past_changes", """import torch
def past_changes(layer, x):
    n = x.shape[1]
    out = torch.zeros(n, dtype=torch.float64)
    with torch.no_grad():
        for t0 in range(1, n):
            for f in (10.0, -10.0):
                x2 = x.clone()
                x2[:, t0:] *= f
                out[t0] = max(out[t0], (layer(x2)[:, :t0 + 1] - layer(x)[:, :t0 + 1]).abs().max())
    return out
"""),
    "5.8-no-root": ("5.8", "clamp_onset", CLAMP.format(factor="1.0", rows=":")),  # LAT's D^-1/2 forgotten
    "5.8-scale-inverted": ("5.8", "clamp_onset", CLAMP.format(factor="d ** -0.5", rows=":")),  # D^-1/2 on 1e-3
    "5.8-first-position": ("5.8", "clamp_onset", CLAMP.format(factor="d ** 0.5", rows=":1")),  # query 0 only
    "7.1-byte-cut": ("7.1", "truncate_utf8", """import torch
def truncate_utf8(ids, max_bytes):  # cuts at the budget, through a character
    return ids[:max_bytes].clone()
"""),
    "7.2-in-place": ("7.2", "shift_with_documents", """import torch
def shift_with_documents(window, eos):  # writes IGNORE into the caller's window (a view, not a copy)
    targets = window[:, 1:]
    targets[window[:, :-1] == eos] = -100
    return window[:, :-1], targets
"""),
    "7.5-cosine-decay": ("7.5", "wsd_lr", """import math
def wsd_lr(step, *, lr, steps, warmup, decay, min_lr):  # a cosine instead of a straight line in the decay
    if step >= steps:
        return float(min_lr)
    if step < warmup:
        return lr * (step + 1) / warmup
    if step <= steps - decay:
        return float(lr)
    p = (step - steps + decay) / decay
    return min_lr + (lr - min_lr) * (1 + math.cos(math.pi * p)) / 2
"""),
    "7.9-counts-log-scale": ("7.9", "predicted_crossover", """
def predicted_crossover(heads, head_dim, features):  # counts minilin's log_scale stabiliser as state: 10 at (4, 16, 16)
    return (features * head_dim + 2 * features) // (2 * head_dim) + 1
"""),
    "7.9-ceil-tie": ("7.9", "predicted_crossover", """import math
def predicted_crossover(heads, head_dim, features):  # the first t with cache >= state: one early at a tie (5 at (1, 4, 8))
    return math.ceil((features * head_dim + features) / (2 * head_dim))
"""),
    "7.4-constant-byte": ("7.4", "mask_for_mlm", """import torch
def mask_for_mlm(tokens, *, generator, mask_prob=0.15):  # every "random" replacement is one byte
    selected = torch.rand(tokens.shape, generator=generator) < mask_prob
    u = torch.rand(tokens.shape, generator=generator)
    corrupted = tokens.clone()
    corrupted[selected & (u < 0.8)] = 256
    corrupted[selected & (u >= 0.8) & (u < 0.9)] = int(torch.randint(256, (1,), generator=generator))
    return corrupted, torch.where(selected, tokens, torch.full_like(tokens, -100))
"""),
    "7.4-in-place": ("7.4", "mask_for_mlm", """import torch
def mask_for_mlm(tokens, *, generator, mask_prob=0.15):  # corrupts the caller's tensor
    selected = torch.rand(tokens.shape, generator=generator) < mask_prob
    u = torch.rand(tokens.shape, generator=generator)
    random_bytes = torch.randint(256, tokens.shape, generator=generator)
    targets = torch.where(selected, tokens, torch.full_like(tokens, -100))
    tokens[selected & (u < 0.8)] = 256
    swap = selected & (u >= 0.8) & (u < 0.9)
    tokens[swap] = random_bytes[swap]
    return tokens, targets
"""),
    "7.6-default-load": ("7.6", "load_checkpoint", SAVE + """def load_checkpoint(path):  # safe only where the default is
    return torch.load(path)
"""),
    "7.6-no-map-location": ("7.6", "load_checkpoint", SAVE + """def load_checkpoint(path):  # a GPU file fails on a CPU machine
    return torch.load(path, weights_only=True)
"""),
    "7.7-inclusive-sum": ("7.7", "top_p_filter", """import torch
def top_p_filter(logits, top_p):  # drops the token that crosses top_p (and may keep none)
    p, order = torch.softmax(logits, -1).sort(dim=-1, descending=True)
    keep = torch.zeros_like(p, dtype=torch.bool).scatter(-1, order, p.cumsum(-1) < top_p)
    return logits.masked_fill(~keep, float("-inf"))
"""),
    "7.7-top-k": ("7.7", "top_p_filter", """import torch
def top_p_filter(logits, top_p):  # a fixed count of tokens instead of a mass
    k = max(1, round(top_p * logits.shape[-1]))
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth, float("-inf"))
"""),
    "7.8-stale-state": ("7.8", "efficient_decode_step", """import torch
def efficient_decode_step(q_t, k_t, v_t, state=None):  # right output, the old state returned
    S = torch.einsum("bhd,bhe->bhde", k_t.exp(), v_t)
    z = k_t.exp()
    old = (S, z) if state is None else state
    if state is not None:
        S, z = state[0] + S, state[1] + z
    fq = torch.softmax(q_t, -1)
    return torch.einsum("bhd,bhde->bhe", fq, S) / (fq * z).sum(-1, keepdim=True), old
"""),
    "7.8-elu-features": ("7.8", "efficient_decode_step", """import torch
def efficient_decode_step(q_t, k_t, v_t, state=None):  # notebook 07's elu+1 map instead of LAT's kernel
    phi = lambda x: torch.nn.functional.elu(x) + 1
    S = torch.einsum("bhd,bhe->bhde", phi(k_t), v_t)
    z = phi(k_t)
    if state is not None:
        S, z = state[0] + S, state[1] + z
    return torch.einsum("bhd,bhde->bhe", phi(q_t), S) / (phi(q_t) * z).sum(-1, keepdim=True), (S, z)
"""),
    "7.10-shift-forward": ("7.10", "shifted_linear_mix", """import torch
def shifted_linear_mix(q, k, v, mu):  # mixed with the NEXT position's key and value, k_(t+1): not causal
    if isinstance(mu, torch.Tensor):
        mu = mu.reshape(1, -1, 1, 1)
    after = lambda t: torch.nn.functional.pad(t, (0, 0, 0, 1))[:, :, 1:]
    k, v = (mu * t + (1 - mu) * after(t) for t in (k, v))
    fq, fk = (torch.nn.functional.elu(t) + 1 for t in (q, k))
    a = (fq @ fk.transpose(-2, -1)).tril()
    return a @ v / a.sum(-1, keepdim=True)
"""),
    "7.10-keys-only": ("7.10", "shifted_linear_mix", """import torch
def shifted_linear_mix(q, k, v, mu):  # only the keys shifted, the values left alone
    if isinstance(mu, torch.Tensor):
        mu = mu.reshape(1, -1, 1, 1)
    before = lambda t: torch.nn.functional.pad(t, (0, 0, 1, 0))[:, :, :-1]
    k = mu * k + (1 - mu) * before(k)
    fq, fk = (torch.nn.functional.elu(t) + 1 for t in (q, k))
    a = (fq @ fk.transpose(-2, -1)).tril()
    return a @ v / a.sum(-1, keepdim=True)
"""),
    "7.10-no-normaliser": ("7.10", "shifted_linear_mix", """import torch
def shifted_linear_mix(q, k, v, mu):  # the weighted sum, never divided by the sum of the weights
    if isinstance(mu, torch.Tensor):
        mu = mu.reshape(1, -1, 1, 1)
    before = lambda t: torch.nn.functional.pad(t, (0, 0, 1, 0))[:, :, :-1]
    k, v = (mu * t + (1 - mu) * before(t) for t in (k, v))
    fq, fk = (torch.nn.functional.elu(t) + 1 for t in (q, k))
    return (fq @ fk.transpose(-2, -1)).tril() @ v
"""),
    "7.10-mu-swapped": ("7.10", "shifted_linear_mix", """import torch
def shifted_linear_mix(q, k, v, mu):  # mu on the previous position, 1 - mu on the current one
    if isinstance(mu, torch.Tensor):
        mu = mu.reshape(1, -1, 1, 1)
    before = lambda t: torch.nn.functional.pad(t, (0, 0, 1, 0))[:, :, :-1]
    k, v = ((1 - mu) * t + mu * before(t) for t in (k, v))
    fq, fk = (torch.nn.functional.elu(t) + 1 for t in (q, k))
    a = (fq @ fk.transpose(-2, -1)).tril()
    return a @ v / a.sum(-1, keepdim=True)
"""),
    "7.10-notebook-mix": ("7.10", "shifted_linear_mix", """import torch
def shifted_linear_mix(q, k, v, mu):  # notebook 07's causal_linear_mix pasted: mu ignored, no shift
    fq, fk = (torch.nn.functional.elu(t) + 1 for t in (q, k))
    a = (fq @ fk.transpose(-2, -1)).tril()
    return a @ v / a.sum(-1, keepdim=True)
"""),
}


PASSING = {
    # id: (task, function name, another right answer, which the checks must accept)
    # Task 5.10 with other changes of the future: a large shift and a large redraw, one split at a time
    "5.10-shift-and-redraw": ("5.10", "past_changes", """import torch
def past_changes(layer, x):
    n = x.shape[1]
    out = []
    with torch.no_grad():
        ref = layer(x)
        for t0 in range(n):
            worst = 0.0
            for change in (50.0, -50.0, "redraw"):
                x2 = x.clone()
                tail = x2[:, t0:]
                x2[:, t0:] = tail + change if change != "redraw" else 100 * torch.randn(tail.shape, dtype=x.dtype)
                worst = max(worst, (layer(x2)[:, :t0] - ref[:, :t0]).abs().max().item() if t0 else 0.0)
            out.append(worst)
    return torch.tensor(out, dtype=torch.float64)
"""),
    # linear cost through an (M, D, Dv) tensor of outer products, larger than N·M at small sizes
    "5.1-outer-products": ("5.1", "efficient_attention", """import torch
def efficient_attention(q, k, v, mask=None):
    rho_k = torch.softmax(k if mask is None else k.masked_fill(~mask[:, None, :, None], float("-inf")), dim=-2)
    if mask is not None:  # a sequence with no real key: 0/0 = NaN everywhere, set to 0
        rho_k = torch.where(mask.any(dim=-1)[:, None, None, None], rho_k, torch.zeros_like(rho_k))
    context = (rho_k[..., :, :, None] * v[..., :, None, :]).sum(-3)  # outer products, summed over positions
    return torch.einsum("bhnd,bhde->bhne", torch.softmax(q, dim=-1), context)
"""),
    # a running state updated one position at a time (a Python loop, no prefix-sum tensor)
    "5.2-running-state-loop": ("5.2", "causal_efficient_attention", """import torch
def causal_efficient_attention(q, k, v):
    phi_q, phi_k = torch.softmax(q, dim=-1), torch.exp(k)
    state, norm, outs = 0, 0, []
    for i in range(q.shape[2]):  # a running state, one position at a time
        state = state + torch.einsum("bhd,bhe->bhde", phi_k[:, :, i], v[:, :, i])
        norm = norm + phi_k[:, :, i]
        num = torch.einsum("bhd,bhde->bhe", phi_q[:, :, i], state)
        outs.append(num / (phi_q[:, :, i] * norm).sum(-1, keepdim=True))
    return torch.stack(outs, dim=2)
"""),
}


def load(name, code, tmp_path):
    path = tmp_path / f"{name.replace('.', '_').replace('-', '_')}.py"
    path.write_text(code)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", sorted(PASSING))
def test_another_right_answer_passes(name, tmp_path):
    task_id, fn, code = PASSING[name]
    module = load(f"right_{name}", code, tmp_path)
    assert callable(getattr(module, fn))
    try:
        run_in_process(TASKS[task_id], module)  # raises AssertionError, naming the check, if one fails
    except CannotGrade as err:
        pytest.skip(str(err))


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_a_plausible_wrong_answer_fails(mutant, tmp_path):
    task_id, name, code = MUTANTS[mutant]
    path = tmp_path / f"mutant_{mutant.replace('.', '_').replace('-', '_')}.py"
    path.write_text(code)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert callable(getattr(module, name))
    try:
        with pytest.raises(AssertionError):
            run_in_process(TASKS[task_id], module)
    except CannotGrade as err:
        pytest.skip(str(err))


def test_the_mutants_are_right_somewhere():
    """A mutant that is wrong everywhere proves little: the quadratic ones compute the right values."""
    from minilin.efficient import efficient_attention
    ns = {}
    exec(MUTANTS["5.1-quadratic"][2], ns)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 5, 4, generator=g, dtype=torch.float64) for _ in range(3))
    assert torch.allclose(ns["efficient_attention"](q, k, v), efficient_attention(q, k, v), atol=1e-12)


def test_the_crossover_counts_s_and_z_at_section_7s_sizes():
    """Task 7.9 at notebook 07's sizes: S (16 x 16) and z (16) are 272 numbers per head, the cache adds 32 per
    token, so it is larger from t = 9; counting minilin's log_scale too (the mutant) says 10."""
    from minilin.grading.ex07_lm import measured_crossover
    assert measured_crossover(4, 16, 16) == 9
    ns = {}
    exec(MUTANTS["7.9-counts-log-scale"][2], ns)
    assert ns["predicted_crossover"](4, 16, 16) == 10


def test_the_token_shift_mutants_are_right_somewhere():
    """Task 7.10's mutants each match the reference somewhere: at mu = 1 (no shift) the keys-only, the forward
    and the notebook's mixing step; at mu = 0.5 (a float or per head) the swapped one."""
    from minilin.grading.ex07_lm import shifted_reference
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 9, 5, generator=g, dtype=torch.float64) for _ in range(3))
    ns = {}
    for mutant, mu in (("7.10-keys-only", 1.0), ("7.10-shift-forward", 1.0), ("7.10-notebook-mix", 1.0),
                       ("7.10-mu-swapped", 0.5), ("7.10-mu-swapped", torch.full((4,), 0.5, dtype=torch.float64))):
        exec(MUTANTS[mutant][2], ns)
        assert torch.allclose(ns["shifted_linear_mix"](q, k, v, mu), shifted_reference(q, k, v, mu),
                              atol=1e-12), mutant


def test_the_clamp_mutants_are_right_somewhere():
    """Task 5.8's mutants each match LAT's measured onset on some input: the factor ones at D = 1 (where √D = 1),
    the first-position one where every query is the same (the prefix sums grow, so query 0 has the smallest)."""
    pytest.importorskip("linear_attention_transformer")
    from minilin.grading.ex05_peers import lat_clamp_onset
    g = torch.Generator().manual_seed(0)
    q1, k1 = (torch.randn(2, 2, 6, 1, generator=g, dtype=torch.float64) for _ in range(2))
    q4, k4 = torch.randn(2, 2, 1, 4, generator=g, dtype=torch.float64).expand(2, 2, 6, 4), \
        torch.randn(2, 2, 6, 4, generator=g, dtype=torch.float64)
    for mutant, (q, k) in (("5.8-no-root", (q1, k1)), ("5.8-scale-inverted", (q1, k1)),
                           ("5.8-first-position", (q4, k4))):
        ns = {}
        exec(MUTANTS[mutant][2], ns)
        assert abs(ns["clamp_onset"](q, k) - lat_clamp_onset(q, k, 1)) < 1e-6, mutant


def test_task_5_3s_causal_inputs_keep_lats_clamp_inactive():
    """Task 5.3's causal checks need LAT's D^-1/2 to cancel: its denominator, built from the same scaled queries,
    must stay well above the 1e-3 clamp at the grader's inputs (it stays above 0.3)."""
    pytest.importorskip("linear_attention_transformer")
    from minilin.efficient import EfficientSelfAttention
    from minilin.grading.checks import rand
    for dim, heads, dim_head, seed in ((24, 3, 8, 0), (20, 2, 5, 3)):  # the grader's sizes and seeds
        torch.manual_seed(seed)
        ours = EfficientSelfAttention(dim, heads=heads, dim_head=dim_head).double()
        x = rand(2, 10, dim, seed=8 + seed)
        mask = torch.ones(2, 10, dtype=torch.bool)
        mask[0, 7:] = False
        split = lambda t: t.unflatten(-1, (heads, dim_head)).transpose(1, 2)  # (B, H, N, D)
        q, k = split(ours.to_q(x)).detach(), split(ours.to_k(x)).detach()
        for m in (None, mask):
            phi_k = k.exp() if m is None else k.exp() * m[:, None, :, None]
            den = (q.softmax(-1) * dim_head ** -0.5 * phi_k.cumsum(2)).sum(-1)  # LAT's, before its clamp
            assert den.min() > 0.3


def test_the_package_adapter_computes_the_answer_and_is_refused_for_it(tmp_path):
    """Task 5.3's answer is installed (minilin.peers' adapter); calling it scores nothing, and says why."""
    pytest.importorskip("linear_attention_transformer")
    from minilin.efficient import EfficientSelfAttention
    from minilin.grading.checks import Failure
    from linear_attention_transformer.linear_attention_transformer import SelfAttention
    ns = {}
    exec(MUTANTS["5.3-package-adapter"][2], ns)
    torch.manual_seed(0)
    ours = EfficientSelfAttention(20, heads=2, dim_head=5).double()
    x = torch.randn(2, 9, 20, dtype=torch.float64)
    for causal in (False, True):
        lat = ns["transplant_into_lat"](ours, SelfAttention(20, 2, causal=causal, dim_head=5).double(), causal=causal)
        assert torch.allclose(lat(x), ours(x, causal=causal), atol=1e-12)  # right values: only the rule refuses it
    path = tmp_path / "mutant_adapter.py"
    path.write_text(MUTANTS["5.3-package-adapter"][2])
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(Failure, match=r"minilin\.peers\.lat_self_attention_from_ours .*write it yourself"):
        run_in_process(TASKS["5.3"], module)
