#!/usr/bin/env bash
# Nsight Compute profiles of tide's prefill attention kernel and of cuDNN's on the same shape (the causal launch
# of tide_bench's attention section: 8192 tokens, 32 / 8 heads, head_dim 128; cuDNN through PyTorch's SDPA, K/V
# repeated), side by side: where each kernel's cycles go, its instruction mix and its loop bodies.
#
#   tools/gpu/attention_profile.sh TIDE_BENCH OUT_DIR [KERNEL_REGEX]   (default regex: wgmma_prefill)
#
# Writes OUT_DIR/{tide,cudnn}.ncu-rep, their details pages (*.txt) and per-instruction source pages (*_sass.csv),
# and prints tools/gpu/ncu_summary.py's tables. The clocks are left as they are (--clock-control none).
# Needs ncu (Nsight Compute) and PyTorch with cuDNN on the GPU machine; a few tens of seconds.
set -uo pipefail
bench=${1:?usage: attention_profile.sh TIDE_BENCH OUT_DIR [KERNEL_REGEX]}
out=${2:?usage: attention_profile.sh TIDE_BENCH OUT_DIR [KERNEL_REGEX]}
regex=${3:-wgmma_prefill}
here=$(dirname "$0")
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[[ -x "$ncu" ]] || { echo "attention_profile.sh: ncu not found" >&2; exit 1; }
mkdir -p "$out"
"$ncu" --clock-control none --kernel-name "regex:$regex" --launch-count 1 --set full --import-source no -f \
  -o "$out/tide" "$bench" --synthetic r7b --quick --no-baselines --sections attention --attention-decode 1:1024 \
  >"$out/tide_run.log" 2>&1 || { tail -5 "$out/tide_run.log"; exit 1; }
cat >"$out/cudnn.py" <<'PY'
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

q = torch.randn(1, 32, 8192, 128, device="cuda", dtype=torch.bfloat16)
k, v = torch.randn_like(q), torch.randn_like(q)
with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
    for _ in range(3):
        F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
PY
"$ncu" --clock-control none --profile-from-start off --launch-count 1 --set full --import-source no -f \
  -o "$out/cudnn" python3 "$out/cudnn.py" >"$out/cudnn_run.log" 2>&1 || { tail -5 "$out/cudnn_run.log"; exit 1; }
for r in tide cudnn; do
  "$ncu" -i "$out/$r.ncu-rep" --page details --print-details all >"$out/$r.txt" 2>&1
  "$ncu" -i "$out/$r.ncu-rep" --page source --csv --print-source sass >"$out/${r}_sass.csv" 2>&1
done
python3 "$here/ncu_summary.py" details "$out/tide.txt" "$out/cudnn.txt"
python3 "$here/ncu_summary.py" sass "$out/tide_sass.csv" "$out/cudnn_sass.csv"
