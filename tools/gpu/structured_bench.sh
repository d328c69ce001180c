#!/usr/bin/env bash
# Constrained decoding's cost, measured through `tide serve` as users see it: the same workload with every
# request unconstrained, then with every request under a JSON schema (nested objects, enums, bounded strings,
# numbers, arrays; an array of at least 1000 items, so no output can end before max_tokens and both runs decode
# the same number of tokens), at 1 and 64 streams. The model: MODEL_DIR's config.json with random weights made
# on the device (--load-format dummy, FP8), and TOKENIZER_DIR's tokenizer files (the mask work depends on the
# vocabulary). Each run's JSON and the server's log go to $OUT (or ./gpu-out); a summary is printed last.
#
#   tools/gpu/structured_bench.sh TIDE MODEL_DIR TOKENIZER_DIR
set -uo pipefail
tide=${1:?usage: structured_bench.sh TIDE MODEL_DIR TOKENIZER_DIR}
model_src=${2:?usage: structured_bench.sh TIDE MODEL_DIR TOKENIZER_DIR}
tokenizer_src=${3:?usage: structured_bench.sh TIDE MODEL_DIR TOKENIZER_DIR}
out=${OUT:-gpu-out}
mkdir -p "$out"
model=$(mktemp -d)
cp "$model_src/config.json" "$model/"
cp "$tokenizer_src"/tokenizer*.json "$model/"
port=8124
base="http://127.0.0.1:$port"

"$tide" serve "$model" --load-format dummy --quantization fp8 --port "$port" --max-num-seqs 64 \
  >"$out/serve-structured.log" 2>&1 &
server=$!
ready=0
for _ in $(seq 1 600); do
  python3 -c "import urllib.request as u; u.urlopen('$base/health', timeout=2)" 2>/dev/null && { ready=1; break; }
  kill -0 "$server" 2>/dev/null || break
  sleep 0.5
done
[[ $ready == 1 ]] || { echo "structured_bench: the server did not start:"; tail -5 "$out/serve-structured.log"; exit 1; }

schema='{"type": "array", "minItems": 1000, "items": {"type": "object", "properties": {
  "id": {"type": "integer", "minimum": 0, "maximum": 100000}, "name": {"type": "string", "maxLength": 24},
  "kind": {"enum": ["book", "film", "song", "game"]}, "score": {"type": "number"},
  "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 3},
  "meta": {"type": "object", "properties": {"ok": {"type": "boolean"}, "note": {"type": "string", "maxLength": 16}},
           "required": ["ok", "note"]}},
  "required": ["id", "name", "kind", "score", "tags", "meta"], "additionalProperties": false}}'
constrained="{\"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"name\": \"items\", \"schema\": $schema}}, \"temperature\": 1, \"seed\": 7}"
free='{"temperature": 1, "seed": 7}'
# Any text without a NUL byte: the constraint machinery's cost with a mask that allows nearly every token.
permissive='{"structured_outputs": {"grammar": "root ::= [^\\x00]*"}, "temperature": 1, "seed": 7}'

run() {  # NAME CONCURRENCY PROMPTS [ARGS...]
  local name=$1 c=$2 n=$3
  shift 3
  "$tide" bench serve --base-url "$base" --random-input-len 256 --random-output-len 256 --num-prompts "$n" \
    --max-concurrency "$c" --num-warmups 2 --result-json "$out/$name.json" "$@" >"$out/$name.txt" 2>&1 ||
    echo "structured_bench: $name failed (see $out/$name.txt)"
}
for c in 1 64; do
  n=$((c == 1 ? 8 : 192))
  # A first pass of the workload, not reported: the decode steps' CUDA graphs for its batch sizes and positions
  # are recorded here rather than in whichever run comes first.
  run "warm-c$c" "$c" "$n" --extra-body "$free"
  run "free-c$c" "$c" "$n" --extra-body "$free"
  run "any-c$c" "$c" "$n" --no-ignore-eos --extra-body "$permissive"
  run "json-c$c" "$c" "$n" --no-ignore-eos --extra-body "$constrained"
done
python3 -c "import urllib.request as u; print(''.join(l for l in u.urlopen('$base/metrics').read().decode().splitlines(True) if l.startswith('tide_grammar')))" \
  >"$out/structured-metrics.txt" 2>&1
kill -TERM "$server" 2>/dev/null
wait "$server" 2>/dev/null

python3 - "$out" <<'EOF'
import json, sys, os
out = sys.argv[1]
def load(name):
    p = os.path.join(out, name + ".json")
    return json.load(open(p)) if os.path.exists(p) else None
print(f"{'streams':>8} {'run':>5} {'tok/s':>9} {'TPOT ms':>8} {'TPOT vs free':>13} {'full outputs':>13}")
for c in (1, 64):
    f = load(f"free-c{c}")
    for name in ("free", "any", "json"):
        r = load(f"{name}-c{c}")
        if not r or not f:
            print(f"{c:>8} {name:>5} (missing run)")
            continue
        lens = r.get("output_lens", [])
        full = sum(1 for x, m in zip(lens, r.get("max_tokens", [])) if x == m)
        print(f"{c:>8} {name:>5} {r['output_throughput']:>9.1f} {r['median_tpot_ms']:>8.3f} "
              f"{f['median_tpot_ms'] / r['median_tpot_ms']:>13.3f} {full:>6}/{len(lens)}")
EOF
cat "$out/structured-metrics.txt"
