"""Chapter 10's Triton scan (minilin.kernels): forward and backward against minilin.gated and autograd.

On a CPU the kernels run in Triton's interpreter, which must be chosen before triton is first imported
(TRITON_INTERPRET=1); other tests of this session may import triton earlier (fla does), so on a CPU
`test_interpreted_suite` reruns this file in a child process with the variable set, and the tests below run
there (each skips in the parent). On a GPU they run compiled, in this process, with the bfloat16 tests too.
Sizes are small (the interpreter runs each program in numpy): this file takes well under a minute on one core.

Tolerances: float32 kernel against the float64 recurrence, max |error| <= 1e-5 × max |reference| per tensor
(float32 round-off over ~200 accumulated terms is ~1e-6 of the scale; a wrong decay, mask or chunk offset is
O(1e-2) or more). bfloat16 (GPU only): fla's test tolerance, relative RMS error <= 5e-3 against float32.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from minilin import gated

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: threads cost more than they save
ON_GPU = torch.cuda.is_available()
IN_CHILD = os.environ.get("TRITON_INTERPRET") == "1"
runs_here = pytest.mark.skipif(not (ON_GPU or IN_CHILD), reason="runs in test_interpreted_suite's child process "
                                                                 "(TRITON_INTERPRET=1 before triton is imported)")
DEVICE = "cuda" if ON_GPU else "cpu"
REL = 1e-5


def _have_triton():
    try:
        import triton  # noqa: F401
        return True
    except ImportError:
        return False


@pytest.mark.skipif(ON_GPU or IN_CHILD or not _have_triton(), reason="the parent of the interpreted run")
def test_interpreted_suite():
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONHASHSEED="0", OMP_NUM_THREADS="1")
    env.pop("PYTEST_XDIST_WORKER", None)
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:xdist", "-p", "no:cacheprovider",
                          "-p", "no:randomly", str(Path(__file__))],
                         cwd=Path(__file__).resolve().parents[1], env=env, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    skips = [line for line in run.stdout.splitlines() if line.startswith("SKIPPED")]
    assert " passed" in run.stdout and all("parent of the interpreted run" in line or "a CUDA GPU" in line
                                           for line in skips), run.stdout[-2000:]  # nothing else skipped there


def _close(got, want, rel=REL):
    scale = want.abs().max().item() or 1.0
    err = (got.double() - want.double()).abs().max().item()
    assert err <= rel * scale, f"max |error| {err:.3g} > {rel:g} × max |reference| {scale:.3g}"


def _inputs(N, *, decay, initial, seed=0, B=1, H=2, Dk=8, Dv=5):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, H, N, d, generator=g) for d in (Dk, Dk, Dv))
    log_decay = None
    if decay == "retention":
        log_decay = torch.log(gated.retention_gammas(H)).float().view(1, H, 1).expand(B, H, N).contiguous()
    elif decay == "gate":  # a Mamba-2-style gate per head and token, some near 0 (forget), some near 1
        log_decay = torch.nn.functional.logsigmoid(3 * torch.randn(B, H, N, generator=g))
    state = torch.randn(B, H, Dk, Dv, generator=g) if initial else None
    return [t if t is None else t.to(DEVICE) for t in (q, k, v, log_decay, state)]


def _reference(q, k, v, log_decay, state):
    """minilin.gated's recurrence in float64 (gla with a (B, H, N) gate; no gate: the plain recurrence)."""
    d = [None if t is None else t.double() for t in (q, k, v, log_decay, state)]
    if d[3] is None:
        return gated.recurrent_reference(d[0], d[1], d[2], initial_state=d[4], return_state=True)
    return gated.gla(d[0], d[1], d[2], d[3], initial_state=d[4], return_state=True, chunk_size=16)


@runs_here
@pytest.mark.parametrize("N", [1, 7, 64, 65, 200])
@pytest.mark.parametrize("chunk", [16, 32])
@pytest.mark.parametrize("decay", [None, "retention", "gate"])
@pytest.mark.parametrize("initial", [False, True])
def test_forward_and_gradients_equal_the_recurrence(N, chunk, decay, initial):
    from minilin.kernels import chunk_scan
    q, k, v, log_decay, state = _inputs(N, decay=decay, initial=initial, seed=N)
    leaves = [t for t in (q, k, v, log_decay, state) if t is not None]
    for t in leaves:
        t.requires_grad_(True)
    out, final = chunk_scan(q, k, v, log_decay, initial_state=state, return_state=True, chunk_size=chunk)
    want, want_final = _reference(q, k, v, log_decay, state)
    _close(out, want)
    _close(final, want_final)
    g = torch.Generator().manual_seed(1)
    d_out, d_final = torch.randn(out.shape, generator=g).to(DEVICE), torch.randn(final.shape, generator=g).to(DEVICE)
    got = torch.autograd.grad((out * d_out).sum() + (final * d_final).sum(), leaves)
    ref = torch.autograd.grad((want * d_out.double()).sum() + (want_final * d_final.double()).sum(), leaves)
    for name, a, b in zip("q k v log_decay initial_state".split(), got, ref):
        _close(a, b, rel=REL if name != "log_decay" else 1e-4)  # dg: a difference of q·dq and k·dk sums


@runs_here
@pytest.mark.parametrize("decay", [None, "retention"])
def test_later_tokens_never_move_earlier_outputs(decay):
    from minilin.kernels import chunk_scan
    q, k, v, log_decay, _ = _inputs(50, decay=decay, initial=False, seed=3)
    base = chunk_scan(q, k, v, log_decay, chunk_size=16)
    for t in (q, k, v):
        t2 = t.clone()
        t2[:, :, 21:] = 1e3 * torch.randn_like(t2[:, :, 21:])
        args = [t2 if u is t else u for u in (q, k, v)]
        moved = chunk_scan(*args, log_decay, chunk_size=16)
        assert torch.equal(moved[:, :, :21], base[:, :, :21])  # bit-identical before position 21


@runs_here
def test_linear_attention_and_retention_wrappers():
    from minilin.kernels import linear_attention_causal, retention
    from minilin.linear import causal_linear_attention, elu_plus_one
    q, k, v, _, _ = _inputs(70, decay=None, initial=False, seed=5)
    fq, fk = elu_plus_one.query(q), elu_plus_one.key(k)
    _close(linear_attention_causal(fq, fk, v, chunk_size=32),
           causal_linear_attention(fq.double(), fk.double(), v.double()))
    gamma = gated.retention_gammas(2)
    _close(retention(q, k, v, gamma, chunk_size=16), gated.retention(q.double(), k.double(), v.double(), gamma))


@runs_here
@pytest.mark.parametrize("attention, twin", [("triton-linear", "linear"), ("triton-retention", "retention")])
def test_tinylm_trains_with_a_triton_variant(attention, twin):
    # A few AdamW steps of a tiny TinyLM through the kernels; the same weights under the PyTorch variant give
    # the same loss and gradients (the modules share parameter names), and the loss goes down
    from minilin.kernels import scan
    from minilin.model import LMConfig, TinyLM
    torch.manual_seed(0)
    cfg = dict(block_size=40, dim=32, depth=1, heads=2, causal=True)
    model, twin_model = TinyLM(LMConfig(attention=attention, **cfg)), TinyLM(LMConfig(attention=twin, **cfg))
    twin_model.load_state_dict(model.state_dict())
    model, twin_model = model.to(DEVICE), twin_model.to(DEVICE)
    idx = torch.randint(0, 256, (2, 40), generator=torch.Generator().manual_seed(0)).to(DEVICE)
    cls = {"triton-linear": scan.TritonLinearSelfAttention, "triton-retention": scan.TritonRetentionSelfAttention}
    before = cls[attention].used_kernel
    out, twin_out = model(idx[:, :-1], idx[:, 1:]), twin_model(idx[:, :-1], idx[:, 1:])
    loss, twin_loss = (o[1] if isinstance(o, tuple) else o.loss for o in (out, twin_out))
    assert cls[attention].used_kernel > before  # the kernel ran, not the PyTorch fallback
    _close(loss.detach(), twin_loss.detach(), rel=1e-5)
    loss.backward()
    twin_loss.backward()
    for (name, p), t in zip(model.named_parameters(), twin_model.parameters()):
        if p.grad is not None:
            _close(p.grad, t.grad, rel=1e-4)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(4):
        opt.zero_grad()
        out = model(idx[:, :-1], idx[:, 1:])
        step_loss = out[1] if isinstance(out, tuple) else out.loss
        step_loss.backward()
        opt.step()
        losses.append(step_loss.item())
    assert losses[-1] < losses[0], losses


@runs_here
@pytest.mark.parametrize("attention", ["triton-linear", "triton-retention"])
def test_train_command_runs_a_triton_variant(attention, tmp_path, monkeypatch):
    # `python -m minilin train --attention triton-...` at a tiny size, a few steps: through the kernels (the
    # interpreter on a CPU), not the PyTorch fallback, and it finishes with a finite loss
    from minilin.__main__ import main
    from minilin.kernels import scan
    monkeypatch.chdir(tmp_path)
    cls = {"triton-linear": scan.TritonLinearSelfAttention, "triton-retention": scan.TritonRetentionSelfAttention}
    before = cls[attention].used_kernel
    args = ["train", "--attention", attention, "--steps", "3", "--block-size", "32", "--dim", "32", "--depth", "1",
            "--heads", "2", "--batch-size", "2", "--eval-batches", "1", "--eval-interval", "3", "--device", DEVICE,
            "--no-progress", "--no-save", "--history", "history.json"]
    assert main(args) == 0
    assert cls[attention].used_kernel > before
    import json
    history = json.loads((tmp_path / "history.json").read_text())
    assert history["step"] == [1, 2, 3], history
    assert torch.isfinite(torch.tensor(history["loss"] + history["val_loss"])).all(), history


@runs_here
def test_bench_builders_agree_with_ours():
    from minilin.bench.methods import Tensors, linear_fn
    from minilin.gated_attention import retention_fn
    from minilin.kernels.scan import linear_bench_fn, retention_bench_fn
    make = Tensors(DEVICE, torch.float32, 0)
    q, k, v, _, _ = _inputs(40, decay=None, initial=False, seed=7)
    _close(linear_bench_fn(40, make, causal=True)(q, k, v), linear_fn(40, make, causal=True)(q, k, v), rel=1e-5)
    _close(retention_bench_fn(40, make, causal=True, heads=2)(q, k, v),
           retention_fn(40, make, causal=True, heads=2)(q, k, v), rel=1e-5)


@pytest.mark.parametrize("n, d, chunk", [(4096, 64, 64), (1000, 32, 16)])
def test_meta_backward_counts_the_graded_products(n, d, chunk):
    # the benchmark's model of the backward (model_flops_fwdbwd) must count what Task 10.2 grades: bwd_dq's four
    # products and bwd_dkdv's seven per chunk
    from torch.utils.flop_counter import FlopCounterMode

    from minilin.grading.ex10_kernel import count
    from minilin.kernels import chunk_scan
    q = torch.empty(1, 1, n, d, device="meta", requires_grad=True)
    o = chunk_scan(q, q, q, chunk_size=chunk)
    with FlopCounterMode(display=False) as counter:
        o.backward(torch.empty_like(o))
    assert counter.get_total_flops() == count(n, d, chunk, 2)[0]


@runs_here
@pytest.mark.parametrize("call, message", [
    (lambda q, k, v: __import__("minilin.kernels", fromlist=["x"]).chunk_scan(q, k, v, chunk_size=24),
     "power of two"),
    (lambda q, k, v: __import__("minilin.kernels", fromlist=["x"]).chunk_scan(q.double(), k, v), "float64"),
    (lambda q, k, v: __import__("minilin.kernels", fromlist=["x"]).chunk_scan(q, k, v, -q[..., 0].abs() + 1),
     "<= 0"),
])
def test_bad_input_names_the_fix(call, message):
    q, k, v, _, _ = _inputs(20, decay=None, initial=False)
    with pytest.raises(ValueError, match=message):
        call(q, k, v)


@pytest.mark.skipif(not ON_GPU, reason="bfloat16 kernels: a CUDA GPU")
@pytest.mark.parametrize("decay", [None, "retention", "gate"])
def test_bfloat16_within_fla_tolerance(decay):
    # fla's tests (tests/ops/test_simple_gla.py) check bf16 against float32 by relative RMS error <= 5e-3
    from minilin.kernels import chunk_scan
    q, k, v, log_decay, state = _inputs(1000, decay=decay, initial=True, B=2, H=4, Dk=64, Dv=64)
    ref = chunk_scan(q, k, v, log_decay, initial_state=state)
    got = chunk_scan(q.bfloat16(), k.bfloat16(), v.bfloat16(), log_decay, initial_state=state)
    rms = ((got.float() - ref).pow(2).mean().sqrt() / ref.pow(2).mean().sqrt()).item()
    assert rms <= 5e-3, rms


def test_importing_minilin_needs_no_triton():
    code = ("import sys, minilin, minilin.kernels, minilin.variants as v; v.build_module('triton-linear', 8, 2); "
            "v.build_module('triton-retention', 8, 2); assert 'triton' not in sys.modules, 'triton imported'")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]


def test_missing_triton_is_one_clear_error(monkeypatch):
    import builtins
    from minilin.kernels import require_triton
    real = builtins.__import__

    def no_triton(name, *args, **kwargs):
        if name == "triton" or name.startswith("triton."):
            raise ImportError("No module named 'triton'")
        return real(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", no_triton)
    with pytest.raises(ImportError, match="pip install triton"):
        require_triton()


@pytest.mark.skipif(not _have_triton(), reason="needs triton")
def test_notebook_10_chooses_the_interpreter_before_it_imports_triton():
    # Notebook 10 runs its kernels in its own process: without a GPU its first code cell must set TRITON_INTERPRET=1
    # before triton is imported (afterwards the choice is made). Run that cell in a fresh process with no GPU
    # visible and no TRITON_INTERPRET set, and ask triton whether it interprets.
    import json
    root = Path(__file__).resolve().parents[1]
    nb = json.loads((root / "notebooks" / "10_write_the_kernel.ipynb").read_text(encoding="utf-8"))
    code = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    upto = next(i for i, s in enumerate(code) if "import triton" in s)
    setup = "\n".join(code[:upto + 1])  # the cells up to the one that imports triton
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1")
    check = setup + "\nfrom minilin.kernels.scan import interpreting\nassert interpreting(), 'triton compiles'\n"
    run = subprocess.run([sys.executable, "-c", check], cwd=root / "notebooks", env=env, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    # and the same cell with triton imported first fails loudly instead of running compiled kernels on a CPU
    run = subprocess.run([sys.executable, "-c", "import triton\n" + setup], cwd=root / "notebooks", env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode != 0 and "restart the kernel" in run.stderr, run.stderr[-2000:]
