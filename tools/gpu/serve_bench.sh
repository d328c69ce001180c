#!/usr/bin/env bash
# Serving benchmarks on a GPU, measured as users see them: `tide serve` on a real model's shape with random
# weights made on the device (--load-format dummy), driven by `tide bench serve` over HTTP. Each run's JSON and
# the servers' logs go to $OUT (or ./gpu-out); a summary table is printed last.
#
#   tools/gpu/serve_bench.sh TIDE MODEL_DIR [WORKLOAD ...]
#
# TIDE: the tide program; MODEL_DIR: a folder with the model's config.json (bench/models/...), served with at
# least 131072 positions. Workloads (all by default):
#   load        seconds to ready: bf16 weights, then --quantization fp8
#   one         1 stream, 1000 prompt tokens, 200 out: TPOT against the batch-1 decode step
#   long        1 stream, a 32000-token prompt, 1 token out, 3 times: TTFT against a 32K prefill
#   prefix      16 streams of 7000-token prompts sharing 6000 (after one warm-up), then with none shared
#   many        256 streams, 1000 in / 1000 out, 512 requests, FP8 weights and FP8 KV cache
#   many-bf16kv the same with the bf16 KV cache
set -uo pipefail
tide=${1:?usage: serve_bench.sh TIDE MODEL_DIR [WORKLOAD ...]}
model=${2:?usage: serve_bench.sh TIDE MODEL_DIR [WORKLOAD ...]}
shift 2
workloads=("$@")
[[ ${#workloads[@]} -gt 0 ]] || workloads=(load one long prefix many many-bf16kv)
out=${OUT:-gpu-out}
mkdir -p "$out"
# R7B's config.json declares 8192 positions though the model runs 128K (its RoPE has no scaling): the long
# workloads serve a copy with at least 131072.
serve_dir=$(mktemp -d)
python3 - "$model/config.json" "$serve_dir/config.json" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
c["max_position_embeddings"] = max(c.get("max_position_embeddings", 0), 131072)
json.dump(c, open(sys.argv[2], "w"), indent=2)
EOF
model=$serve_dir
port=8123
base="http://127.0.0.1:$port"

# Starts `tide serve MODEL --load-format dummy ARGS...` logging to $out/serve-NAME.log and waits until ready.
start_server() {
  local name=$1
  shift
  "$tide" serve "$model" --load-format dummy --port "$port" --max-num-seqs 256 "$@" >"$out/serve-$name.log" 2>&1 &
  server=$!
  for _ in $(seq 1 600); do
    python3 -c "import urllib.request as u; u.urlopen('$base/health', timeout=2)" 2>/dev/null && return 0
    kill -0 "$server" 2>/dev/null || { echo "serve_bench: the server ($name) exited:"; tail -5 "$out/serve-$name.log"; return 1; }
    sleep 0.5
  done
  echo "serve_bench: the server ($name) was not ready in 300 s"
  return 1
}

stop_server() {
  kill -TERM "$server" 2>/dev/null
  wait "$server" 2>/dev/null
}

# Runs `tide bench serve` with ARGS, result to $out/NAME.json, table to $out/NAME.txt.
bench() {
  local name=$1
  shift
  "$tide" bench serve --base-url "$base" --result-json "$out/$name.json" "$@" >"$out/$name.txt" 2>&1 ||
    echo "serve_bench: $name: the benchmark failed (see $out/$name.txt)"
}

load_seconds() { grep -o 'model loaded in [0-9.]* s' "$out/serve-$1.log" | grep -o '[0-9.]*' | head -1; }

has() { [[ " ${workloads[*]} " == *" $1 "* ]]; }
for w in "${workloads[@]}"; do
  [[ $w =~ ^(load|one|long|prefix|many|many-bf16kv)$ ]] || { echo "serve_bench: unknown workload '$w'"; exit 2; }
done

if has load; then
  start_server load-bf16 && stop_server
  start_server load-fp8 --quantization fp8 && stop_server
  echo "load: bf16 $(load_seconds load-bf16) s, fp8 $(load_seconds load-fp8) s"
fi

# The FP8-weight, FP8-KV server serves every workload but the bf16 KV cache's.
fp8kv=()
for w in "${workloads[@]}"; do [[ $w =~ ^(one|long|prefix|many)$ ]] && fp8kv+=("$w"); done
if [[ ${#fp8kv[@]} -gt 0 ]] && start_server fp8 --quantization fp8 --kv-cache-dtype fp8; then
  for w in "${fp8kv[@]}"; do
    case "$w" in
      one) bench one --random-input-len 1000 --random-output-len 200 --num-prompts 4 --max-concurrency 1 ;;
      long) bench long --random-input-len 32000 --random-output-len 1 --num-prompts 3 --max-concurrency 1 ;;
      prefix)
        bench prefix-shared --random-prefix-len 6000 --random-input-len 1000 --random-output-len 64 \
          --num-prompts 16 --max-concurrency 16 --num-warmups 1
        bench prefix-none --random-input-len 7000 --random-output-len 64 --num-prompts 16 --max-concurrency 16 \
          --seed 7
        ;;
      many) bench many --random-input-len 1000 --random-output-len 1000 --num-prompts 512 --max-concurrency 256 ;;
    esac
  done
  stop_server
fi
if has many-bf16kv && start_server bf16kv --quantization fp8; then
  bench many-bf16kv --random-input-len 1000 --random-output-len 1000 --num-prompts 512 --max-concurrency 256
  stop_server
fi

echo "--- serving benchmarks (JSON in $out)"
for f in "$out"/*.json; do
  [[ -e $f ]] || continue
  python3 - "$f" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
def f(key, digits=1):
    v = r.get(key)
    return "-" if v is None else f"{v:.{digits}f}"
name = sys.argv[1].rsplit('/', 1)[-1][:-5]
print(f"{name:14s} ok {r.get('completed')} failed {r.get('failed')} {r.get('finish_reason_counts')} "
      f"out tok/s {f('output_throughput', 0)} TTFT p50/p99 {f('median_ttft_ms')}/{f('p99_ttft_ms')} ms "
      f"TPOT p50 {f('median_tpot_ms', 2)} ms ITL p99 {f('p99_itl_ms')} ms "
      f"peak concurrency {r.get('max_concurrent_requests')}")
EOF
done
