"""Triton kernels for the course's scans (chapter 10). Importing this package needs no triton: the kernels are
compiled (or, on the CPU, interpreted) on first use, and a missing triton is one clear error naming the fix.

    chunk_scan              the chunked causal scan with an optional per-head scalar decay (minilin.kernels.scan)
    linear_attention_causal causal linear attention on given features, normalised (triton-linear-causal)
    retention               RetNet's retention, one decay per head (triton-retention-causal)
"""
from minilin.kernels.scan import (  # noqa: F401
    TritonLinearSelfAttention, TritonRetentionSelfAttention, chunk_scan, linear_attention_causal, require_triton,
    retention)
