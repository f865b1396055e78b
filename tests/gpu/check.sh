#!/usr/bin/env bash
# The course on a GPU, checked by one command from the course folder:
#   1. every notebook under strict nbval, in parallel (the same check CI runs on its CPU),
#   2. the unit tests that have a CUDA path (they skip where CUDA is absent),
#   3. the causal scans timed on the device (python -m minilin bench).
# It writes a short report (default results/gpu-check/report.md, with the logs beside it) and exits 1 when a step
# fails, 2 on a usage error or a missing package.
#
#   bash tests/gpu/check.sh                      # on a CUDA machine: about 6-8 minutes on one H200 (before the Triton step: not yet timed there)
#   bash tests/gpu/check.sh --device cpu --notebooks notebooks/00_start_here.ipynb   # what CI runs (it cannot rot)
#
# Offline machines with their own PyTorch: see README, "GPU notes" (bring nbval & co. as wheels).
set -uo pipefail
cd "$(dirname "$0")/../.."

device=cuda
out=results/gpu-check
notebooks=""
jobs=""
usage() { echo "usage: bash tests/gpu/check.sh [--device cuda|cpu] [--notebooks 'A.ipynb B.ipynb'] [--out DIR] [--jobs N]" >&2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --device) device="${2:-}"; shift 2 ;;
    --out) out="${2:-}"; shift 2 ;;
    --notebooks) notebooks="${2:-}"; shift 2 ;;
    --jobs) jobs="${2:-}"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "tests/gpu/check.sh: error: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [ "$device" != cuda ] && [ "$device" != cpu ]; then
  echo "tests/gpu/check.sh: error: --device must be cuda or cpu, got '$device'" >&2; exit 2
fi
py="${PYTHON:-python}"
missing=$("$py" - <<'PY'
import importlib.util
need = {"nbval": "nbval", "ipykernel": "ipykernel", "xdist": "pytest-xdist", "pytest": "pytest", "torch": "torch",
        "matplotlib": "matplotlib", "minilin": "the course (pip install -e . or PYTHONPATH=.)"}
print(" ".join(name for module, name in need.items() if importlib.util.find_spec(module) is None))
PY
)
if [ -n "$missing" ]; then
  echo "tests/gpu/check.sh: error: missing $missing: install them (offline: README, GPU notes, brings them as wheels)" >&2
  exit 2
fi
if [ "$device" = cuda ]; then
  if ! "$py" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "tests/gpu/check.sh: error: --device cuda but torch sees no CUDA device here; use --device cpu" >&2; exit 2
  fi
  export CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES-0}"
else
  export CUDA_VISIBLE_DEVICES=""  # the notebooks pick CUDA when they see it: here they must not
fi
[ -n "$notebooks" ] || notebooks=$(ls notebooks/*.ipynb | tr '\n' ' ')
[ -n "$jobs" ] || jobs=$(( $(nproc) < 10 ? $(nproc) : 10 ))
mkdir -p "$out"
export TQDM_DISABLE=1 PYTHONHASHSEED=0 PYDEVD_DISABLE_FILE_VALIDATION=1
report="$out/report.md"
status=0
summary() { grep -E "^(=+ )?[0-9]+ (passed|failed|error)|(passed|failed|error).* in [0-9.]+s" "$1" | tail -1 | tr -d '='; }

step() {  # name, log file, command...
  local name="$1" log="$2"; shift 2
  local start rc
  start=$(date +%s)
  "$@" > "$log" 2>&1
  rc=$?
  [ "$rc" -eq 0 ] || status=1
  echo "| $name | $([ "$rc" -eq 0 ] && echo pass || echo "FAIL (exit $rc)") | $(( $(date +%s) - start )) s | $(summary "$log" | sed 's/|/\//g') |" >> "$report.rows"
  echo "$name: exit $rc ($(( $(date +%s) - start )) s)"
}

rm -f "$report.rows"
# shellcheck disable=SC2086
step "strict nbval ($(echo $notebooks | wc -w) notebooks)" "$out/nbval.log" \
  "$py" -m pytest --nbval -p no:cacheprovider -q -rf -n "$jobs" --dist loadscope $notebooks
# the tests whose names say they depend on the device (sampling across devices, device resolution, the messages)
step "unit tests with a CUDA path" "$out/unit.log" "$py" -m pytest -p no:cacheprovider -q -rs -p no:xdist \
  -k "cuda or device" tests
if [ "$device" = cuda ]; then
  step "causal bench, bf16" "$out/bench.log" "$py" -m minilin bench --device cuda --dtype bfloat16 \
    --lengths 1024,4096,16384,65536 --methods sdpa-causal,performer-causal,linear-causal,retention-causal,gla-causal,deltanet-causal,gated-deltanet-causal \
    --passes fwd --rounds 5 --no-progress --out "$out/bench"
  # chapter 10's Triton scans against FlashAttention and the eager scan, forward and forward+backward (issue goals)
  step "Triton scans, bf16" "$out/bench.log" "$py" -m minilin bench --device cuda --dtype bfloat16 \
    --lengths 1024,4096,16384,65536 --methods sdpa-causal,linear-causal,triton-linear-causal,triton-retention-causal \
    --passes fwd,fwdbwd --rounds 5 --no-progress --out "$out/bench-triton"
else
  step "causal bench, float32 (small)" "$out/bench.log" "$py" -m minilin bench --device cpu --dtype float32 \
    --lengths 128,256 --model-lengths 256 --methods sdpa-causal,linear-causal --passes fwd --rounds 2 --no-plots \
    --no-progress --out "$out/bench"
fi

{
  echo "# The course checked on $device"
  echo
  echo "$(date -u +%Y-%m-%dT%H:%MZ); commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown);" \
       "$("$py" -c "import sys, torch; print(f'Python {sys.version.split()[0]}, torch {torch.__version__}, ' + (torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no CUDA device'))")"
  echo
  echo "| step | result | time | pytest summary |"
  echo "|---|---|---|---|"
  cat "$report.rows"
  echo
  echo "Failures (nbval): $(grep -c '^FAILED' "$out/nbval.log" || true); logs: nbval.log, unit.log, bench.log; bench tables: bench/."
  grep '^FAILED' "$out/nbval.log" "$out/unit.log" | sed 's/^/- /' || true
} > "$report"
rm -f "$report.rows"
cat "$report"
exit "$status"
