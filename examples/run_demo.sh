#!/usr/bin/env bash
# The demo: real tiny QLoRA training on CPU, on 1 rank and then on 2 ranks, then the comparison
# and an HTML report. usage: examples/run_demo.sh [OUTPUT_DIR]   (default: demo_output)
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-demo_output}"
steps="${DEMO_STEPS:-40}"
mkdir -p "$out"
for n in 1 2; do
  echo "==> tiny QLoRA on $n CPU rank(s), $steps steps"
  bash examples/launch_tiny_qlora.sh "$n" "$out/logs" "$out/outputs/ranks$n" \
    --tiny-dir "$out/tiny-llama" --max-steps "$steps" --batch-size 16 --seq-len 128 2>"$out/train_ranks$n.stderr"
done
echo "==> analyze_logs --compare $out/logs"
.venv/bin/analyze_logs --compare "$out/logs"
.venv/bin/analyze_logs --report "$out/report.html" "$out/logs"
echo "==> report: $out/report.html"
