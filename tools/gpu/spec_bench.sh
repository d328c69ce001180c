#!/usr/bin/env bash
# Speculative decoding's benefit on real text: `tide generate` on the prompts of bench/prompts/quoting.jsonl
# (each quotes a passage; greedy, --ignore-eos, one request after another) without speculation, with prompt
# lookup and with a draft model at several k, each run twice. Prints one line per run: output tokens per
# second (the tokens over the requests' summed wall time), drafted and accepted tokens, the draft's steps and
# seconds, and whether the ids are those of the first run without speculation.
#
#   tools/gpu/spec_bench.sh TIDE DEVICE MODEL [DRAFT] [KS]   (KS: draft counts, default "2 3 4")
#
# SPEC_BENCH_FLAGS adds `tide generate` flags to every run (e.g. "--temperature 0.7 --top-k 40 --seed 1": sampled
# runs, whose ids differ with speculation by design).
#
# Example: tools/gpu/spec_bench.sh build-cuda/apps/tide/tide cuda models/tide-demo models/tide-demo-draft
set -euo pipefail
tide=${1:?usage: spec_bench.sh TIDE DEVICE MODEL [DRAFT] [KS]}
device=${2:?device}
model=${3:?model}
draft=${4:-}
ks=${5:-2 3 4}
read -r -a extra <<<"${SPEC_BENCH_FLAGS:-}"
prompts=$(dirname "$0")/../../bench/prompts/quoting.jsonl
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

run() {  # NAME [SPECULATIVE_CONFIG]
  local name=$1 out
  for rep in 1 2; do
    out="$work/$name.$rep.jsonl"
    if [[ $# -ge 2 ]]; then
      "$tide" generate --device "$device" --model "$model" --prompts-file "$prompts" --ignore-eos --json \
        "${extra[@]}" --speculative-config "$2" >"$out" 2>"$work/err"
    else
      "$tide" generate --device "$device" --model "$model" --prompts-file "$prompts" --ignore-eos --json \
        "${extra[@]}" >"$out" 2>"$work/err"
    fi || { echo "spec_bench: $name failed:"; tail -5 "$work/err"; return 1; }
    python3 - "$out" "$work/plain.1.jsonl" "$name" <<'EOF'
import json, sys
runs = [[json.loads(l) for l in open(p)] for p in sys.argv[1:3]]
got, base = runs
tokens = sum(len(r["ids"]) for r in got)
seconds = sum(r["seconds"] for r in got)
spec = got[-1].get("speculative", {})
same = [a["ids"] == b["ids"] for a, b in zip(got, base)]
print(f"{sys.argv[3]:>14}: {tokens / seconds:9.1f} tok/s  ({tokens} tokens, {seconds:.3f} s)  drafted "
      f"{spec.get('draft_tokens', 0)} accepted {spec.get('accepted_tokens', 0)} verifications "
      f"{spec.get('verifications', 0)} draft steps {spec.get('draft_steps', 0)} draft s "
      f"{spec.get('draft_seconds', 0):.3f}  same ids {sum(same)}/{len(same)}")
EOF
  done
}

run plain
for k in $ks; do run "ngram-k$k" "{\"method\": \"ngram\", \"num_speculative_tokens\": $k}"; done
if [[ -n "$draft" ]]; then
  for k in $ks; do run "draft-k$k" "{\"model\": \"$draft\", \"num_speculative_tokens\": $k}"; done
fi
