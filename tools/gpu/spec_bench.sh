#!/usr/bin/env bash
# Speculative decoding's benefit on real text: `tide generate` on the prompts of bench/prompts/quoting.jsonl
# (each quotes a passage; greedy, --ignore-eos, one request after another) without speculation, with prompt
# lookup and with a draft model at several k, each run twice. Prints two lines per run: output tokens per
# second (the tokens over the requests' summed wall time), drafted and accepted tokens, the draft's steps and
# seconds, and whether the ids are those of the first run without speculation; then the engine's steps and
# its time per step (planning, the executor's launch and wait, output processing, the whole step).
#
#   tools/gpu/spec_bench.sh TIDE DEVICE MODEL [DRAFT] [KS]   (KS: draft counts, default "2 3 4")
#
# SPEC_BENCH_FLAGS adds `tide generate` flags to every run (e.g. "--temperature 0.7 --top-k 40 --seed 1": sampled
# runs, whose ids differ with speculation by design). SPEC_BENCH_WARM=1: each run computes the prompts twice in
# one process and counts the second pass only (steady state: the CUDA graphs of every step shape are recorded
# by then; the counters are the second pass's).
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
num_prompts=$(grep -c . "$prompts")
if [[ "${SPEC_BENCH_WARM:-0}" == 1 ]]; then
  cat "$prompts" "$prompts" >"$work/prompts.jsonl"
  prompts=$work/prompts.jsonl
fi

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
    python3 - "$out" "$work/plain.1.jsonl" "$name" "$num_prompts" <<'EOF'
import json, sys
runs = [[json.loads(l) for l in open(p)] for p in sys.argv[1:3]]
n = int(sys.argv[4])
got, base = (r[-n:] for r in runs)
tokens = sum(len(r["ids"]) for r in got)
seconds = sum(r["seconds"] for r in got)
# The engine's counters are cumulative: those of the counted pass are the difference to the pass before.
spec = dict(got[-1].get("speculative", {}))
engine = dict(got[-1].get("engine", {}))
if len(runs[0]) > n:
    before = runs[0][-n - 1].get("speculative", {})
    spec = {key: value - before.get(key, 0) for key, value in spec.items() if not isinstance(value, list)}
    before = runs[0][-n - 1].get("engine", {})
    engine = {key: value - before.get(key, 0) for key, value in engine.items()}
same = [a["ids"] == b["ids"] for a, b in zip(got, base)]
print(f"{sys.argv[3]:>14}: {tokens / seconds:9.1f} tok/s  ({tokens} tokens, {seconds:.3f} s)  drafted "
      f"{spec.get('draft_tokens', 0)} accepted {spec.get('accepted_tokens', 0)} verifications "
      f"{spec.get('verifications', 0)} draft steps {spec.get('draft_steps', 0)} draft s "
      f"{spec.get('draft_seconds', 0):.3f}  same ids {sum(same)}/{len(same)}")
steps = max(engine.get("steps", 0), 1)
print(f"{'':>14}  {steps} steps, per step: schedule "
      f"{1e6 * engine.get('schedule_seconds', 0) / steps:.0f} us, execute {1e6 * engine.get('execute_seconds', 0) / steps:.0f}"
      f" us, output {1e6 * engine.get('output_seconds', 0) / steps:.0f} us, all {1e6 * engine.get('step_seconds', 0) / steps:.0f} us;"
      f" forward passes {engine.get('forward_passes', 0)} (graphs replayed {engine.get('graph_replays', 0)}, recorded "
      f"{engine.get('graphs_recorded', 0)}), the draft's {spec.get('draft_forward_passes', 0)} (replayed "
      f"{spec.get('draft_graph_replays', 0)}, recorded {spec.get('draft_graphs_recorded', 0)})")
EOF
  done
}

run plain
for k in $ks; do run "ngram-k$k" "{\"method\": \"ngram\", \"num_speculative_tokens\": $k}"; done
if [[ -n "$draft" ]]; then
  for k in $ks; do run "draft-k$k" "{\"model\": \"$draft\", \"num_speculative_tokens\": $k}"; done
fi
