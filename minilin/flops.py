"""FLOPs as torch counts them: FlopCounterMode, plus the fused CPU flash-attention kernel (matmul-like ops only).

Its own module, importing only torch, so that it can be used (by `minilin.bench.meters`, and by any check) without
importing the benchmark's package.
"""
import torch
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count


# FlopCounterMode knows the CUDA SDPA kernels; the CPU flash kernel (which the model runs) costs the same
def _cpu_flash_flops(query, key, value, *args, out_shape=None, **kwargs):
    return sdpa_flop_count(query, key, value)


def _cpu_flash_backward_flops(grad_out, query, key, value, *args, out_shape=None, **kwargs):
    return sdpa_backward_flop_count(grad_out, query, key, value)


SDPA_CPU_FLOPS = {
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _cpu_flash_flops,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_flash_backward_flops,
}


def flop_counter():
    """FlopCounterMode that also counts the CPU flash-attention kernel (matmul-like ops only)."""
    return FlopCounterMode(display=False, custom_mapping=SDPA_CPU_FLOPS)
