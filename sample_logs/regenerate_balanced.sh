#!/usr/bin/env bash
# Regenerates sample_logs/balanced/ and sample_logs/stragglers/: real runs of the hand-written loop
# example (examples/train_accelerate_loop.py) on 2 CPU ranks (gloo), with the per-step phases the
# emitter times on every rank, to measure the straggler detectors against:
#   balanced/    BALANCED_RUNS runs (default 24) where both ranks do the same work: nothing differs
#                between them but the launch (port, time); any straggler named here is a false alarm
#   stragglers/  runs where one rank is made slower by a modest amount per step, in one phase:
#                <kind>_rank<R>_<ms>ms/ with kind data (--slow-data: sleeps before each batch),
#                forward (--slow-compute: real compute in forward) or backward (--slow-backward:
#                real compute in backward), on rank R, for ms milliseconds per step
# Every run: 30 steps of the MLP at hidden 8192, batch 256 per rank (a step of about 35 ms on one
# CPU core per rank), verbosity medium without per-bucket records, trends or resource usage
# (the logs stay small; the step records and step_phases are all there).
# Run from anywhere: `make fixtures` (several minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1 CUDA_VISIBLE_DEVICES=""
PY=${PY:-.venv/bin/python}
BALANCED_RUNS=${BALANCED_RUNS:-24}
run() {
  local dir=$1; shift
  "$(dirname "$PY")/accelerate" launch --multi_gpu --num_processes 2 --num_machines 1 --mixed_precision no \
    --dynamo_backend no --main_process_port "$("$PY" -c 'import socket; s=socket.socket(); s.bind(("",0)); print(s.getsockname()[1])')" \
    examples/train_accelerate_loop.py --steps 30 --hidden 8192 --batch-size 256 --verbosity medium \
    --log-setting communication_records=false --log-setting trends=false --log-setting resource_usage_steps=0 \
    --log-dir "$dir" "$@" >/dev/null
  sleep 1  # session ids are per second
}
for i in $(seq 1 "$BALANCED_RUNS"); do
  run "$work/balanced"
  echo "balanced run $i of $BALANCED_RUNS"
done
# two runs of each kind, 25 and 40 ms per step (a step takes about 35 ms), on either rank
run "$work/stragglers/data_rank1_25ms" --slow-rank 1 --slow-data 0.025
run "$work/stragglers/data_rank0_40ms" --slow-rank 0 --slow-data 0.040
run "$work/stragglers/forward_rank1_25ms" --slow-rank 1 --slow-compute 0.025
run "$work/stragglers/forward_rank0_40ms" --slow-rank 0 --slow-compute 0.040
run "$work/stragglers/backward_rank0_25ms" --slow-rank 0 --slow-backward 0.025
run "$work/stragglers/backward_rank1_40ms" --slow-rank 1 --slow-backward 0.040
for name in balanced stragglers; do
  rm -rf "sample_logs/$name"
  cp -r "$work/$name" "sample_logs/$name"
  # the paths the runs recorded, if any: relative to the repository
  find "sample_logs/$name" -type f \( -name '*.log' -o -name '*.jsonl' -o -name '*.json' -o -name '*.txt' \) \
    -exec sed -i -e "s#$work/##g" -e "s#$PWD/##g" {} +
done
echo "fixtures written to sample_logs/balanced and sample_logs/stragglers"
du -sh sample_logs/balanced sample_logs/stragglers
