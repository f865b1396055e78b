"""Which torch.device a command runs on (one rule for train, sample and bench), and its processes under torchrun.

"auto" is CUDA when torch can see a GPU, else the CPU. A device this machine does not have raises ValueError
with the fix in the message; the command line turns that into a one-line usage error.
"""
import inspect
import os

import torch
import torch.distributed as dist

DEVICE_HELP = "auto, cpu, cuda, cuda:N or mps (auto = CUDA if available, else CPU)"


def resolve_device(name="auto", local_rank=0):
    """'auto' -> cuda:<local_rank> if CUDA is available, else cpu; 'cuda' -> cuda:<local_rank>.

    local_rank: this process's GPU under torchrun (LOCAL_RANK); 0 otherwise.
    Raises ValueError for a name torch does not know or a device this machine does not have.
    """
    name = str(name)
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ValueError(f"unknown device {name!r}: use --device {DEVICE_HELP}") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"--device {name}: CUDA is not available on this machine (this torch "
                             f"{torch.__version__} sees no GPU); use --device cpu or --device auto")
        if device.index is None:
            device = torch.device("cuda", local_rank)
        if device.index >= torch.cuda.device_count():
            raise ValueError(f"--device {name}: this machine has {torch.cuda.device_count()} CUDA devices "
                             f"(cuda:0 to cuda:{torch.cuda.device_count() - 1}); pick one of them or auto")
    elif device.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"--device {name}: Apple's MPS backend is not available here; use --device cpu or auto")
    elif device.type not in ("cpu", "cuda", "mps"):
        raise ValueError(f"--device {name}: minilin runs on {DEVICE_HELP}")
    return device


# ---- processes under torchrun ----------------------------------------------------------------------------

def distributed_env():
    """(rank, world_size, local_rank) from torchrun's environment; (0, 1, 0) when not launched by it."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    return int(os.environ.get("RANK", "0")), world, int(os.environ.get("LOCAL_RANK", "0"))


def join_process_group(device, world):
    """Start torch.distributed (nccl on CUDA, gloo on CPU) when torchrun started several processes and nobody
    has yet; True when this call started it (the caller then destroys it)."""
    if world <= 1 or dist.is_initialized():
        return False
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return True


def ranks_agree(model):
    """True when every parameter and buffer is bitwise equal to rank 0's (call on all ranks under DDP)."""
    flat = torch.cat([t.detach().reshape(-1).double() for t in list(model.parameters()) + list(model.buffers())])
    reference = flat.clone()
    dist.broadcast(reference, src=0)
    same = torch.tensor([float(torch.equal(flat, reference))], device=flat.device)
    dist.all_reduce(same, op=dist.ReduceOp.MIN)
    return bool(same.item() == 1.0)


def data_parallel(model, device):
    """DistributedDataParallel(model) without buffer broadcasts: Performer's projection is redrawn from
    (seed, count) on every rank alike, so ranks agree without communication (tests/test_train.py checks it)."""
    DDP = torch.nn.parallel.DistributedDataParallel
    no_sync = ({"forward_sync_buffers": False} if "forward_sync_buffers" in inspect.signature(DDP).parameters
               else {"broadcast_buffers": False})  # the name changed in torch 2.13
    return DDP(model, device_ids=[device.index] if device.type == "cuda" else None, **no_sync)


def canonical_device(device):
    """torch.device with its index filled in: "cuda" -> "cuda:<current>", so that "cuda" and "cuda:0" compare equal."""
    device = torch.device(device)
    if device.type != "cpu" and device.index is None:
        backend = getattr(torch, device.type, None)
        current = getattr(backend, "current_device", None)
        if current is not None:
            return torch.device(device.type, current())
    return device


def same_device(a, b):
    """True when two devices name the same one (a generator's "cuda" and a tensor's "cuda:0" do)."""
    return canonical_device(a) == canonical_device(b)
