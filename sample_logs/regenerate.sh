#!/usr/bin/env bash
# Regenerates sample_logs/qlora_tiny_cpu/: the session logs of one real run of the tiny QLoRA
# example on 1 CPU rank and on 2 CPU ranks (gloo), with the trainer_state.json and results.json
# that transformers and the example wrote beside them. Run from anywhere: `make fixtures`.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=sample_logs/qlora_tiny_cpu
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for n in 1 2; do
  bash examples/launch_tiny_qlora.sh "$n" "$work/logs" "$work/outputs/ranks$n" \
    --tiny-dir "$work/tiny-llama" --max-steps 30 --batch-size 16 --seq-len 128 --session-name fixtures
done
rm -rf "$dest"
mkdir -p "$dest"
cp -r "$work/logs" "$dest/logs"
for n in 1 2; do
  mkdir -p "$dest/outputs/ranks$n"
  cp "$work/outputs/ranks$n/trainer_state.json" "$work/outputs/ranks$n/results.json" "$dest/outputs/ranks$n/"
done
# the example records where it wrote the session: keep that relative to the fixture folder
sed -i "s#$work/##g" "$dest"/outputs/ranks*/results.json "$dest"/logs/*/*.jsonl "$dest"/logs/*/*.json 2>/dev/null || true
echo "fixtures written to $dest"
ls -R "$dest"
