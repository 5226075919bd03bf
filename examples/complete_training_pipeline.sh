#!/usr/bin/env bash
# The single-vs-multi pipeline: QLoRA fine-tuning on one process, then on all GPUs (or 2 CPU ranks),
# then the comparison and an HTML report.
#
# usage: examples/complete_training_pipeline.sh [SESSION] [CONFIG] [-- more train_qlora.py args]
#        SESSION defaults to v1, CONFIG (small | medium | large) to small.
#
# Writes, under $SESSIONS_DIR (default: ./sessions):
#   SESSION/single_gpu/  results.json  trainer_state.json  logs/<logkit session>/  train.log  gpu_usage.jsonl
#   SESSION/multi_gpu/   the same, from the multi-process run
#   SESSION/comparison.txt  SESSION/report.html
# A previous run of the same SESSION is moved to SESSION/.previous/ (one kept) rather than
# overwritten.
#
# With GPUs the configurations name real models (all trained as 4-bit NF4 QLoRA):
#   small  = HuggingFaceTB/SmolLM2-135M, 20 steps     medium = HuggingFaceTB/SmolLM2-360M, 100 steps
#   large  = meta-llama/Llama-2-7b-hf,   500 steps    (dataset tatsu-lab/alpaca; MODEL=, DATASET= override)
# Without a GPU, or with TINY=1, they train the tiny local Llama (examples/train_qlora.py --tiny)
# with growing work: small 20 steps, medium 40, large 80.
#
# Environment: SESSIONS_DIR, TINY=1, MODEL, DATASET, MULTI_PROCS (processes of the multi run;
# default: the GPU count, or 2 on CPU), MONITOR=0 (no monitor_gpu around the runs),
# MONITOR_INTERVAL (seconds, default 5), TINY_DIR (where --tiny builds its model).
set -euo pipefail

session="${1:-v1}"
config="${2:-small}"
[ $# -gt 0 ] && shift
[ $# -gt 0 ] && shift
[ "${1:-}" = "--" ] && shift
extra=("$@")

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/.." && pwd)"
train="$here/train_qlora.py"

# Tools: the project's virtual environment when there is one, else whatever PATH has.
if [ -x "$repo/.venv/bin/python" ]; then
  py="$repo/.venv/bin/python"
  launch=("$repo/.venv/bin/accelerate" launch)
  analyze=("$repo/.venv/bin/analyze_logs")
else
  py="$(command -v python3 || command -v python)"
  launch=(accelerate launch)
  analyze=(analyze_logs)
  command -v accelerate >/dev/null || launch=("$py" -m accelerate.commands.launch)
  command -v analyze_logs >/dev/null || analyze=("$py" -m logkit.cli)
fi

case "$config" in small | medium | large) ;; *)
  echo "complete_training_pipeline: unknown config '$config' (small, medium or large)" >&2
  exit 2 ;;
esac

gpus=0
if [ "${TINY:-0}" != "1" ]; then
  gpus=$("$py" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
fi

if [ "$gpus" -gt 0 ]; then
  case "$config" in
    small)  model_args=(--model "${MODEL:-HuggingFaceTB/SmolLM2-135M}" --max-steps 20 --batch-size 4 --seq-len 256) ;;
    medium) model_args=(--model "${MODEL:-HuggingFaceTB/SmolLM2-360M}" --max-steps 100 --batch-size 4 --seq-len 512) ;;
    large)  model_args=(--model "${MODEL:-meta-llama/Llama-2-7b-hf}" --max-steps 500 --batch-size 2 --grad-accum 4 --seq-len 1024) ;;
  esac
  model_args+=(--dataset "${DATASET:-tatsu-lab/alpaca}" --text-field text)
  nprocs="${MULTI_PROCS:-$gpus}"
  single_flags=(--force-single-gpu)
  launch_flags=(--multi_gpu)
  device_env=()
  [ "$nprocs" -gt 1 ] || echo "note: one GPU only: the multi-GPU run uses 1 process, expect a speedup near 1x" >&2
else
  case "$config" in
    small)  model_args=(--tiny --max-steps 20 --batch-size 4 --seq-len 64) ;;
    medium) model_args=(--tiny --max-steps 40 --batch-size 8 --seq-len 64) ;;
    large)  model_args=(--tiny --max-steps 80 --batch-size 16 --seq-len 128) ;;
  esac
  model_args+=(--tiny-dir "${TINY_DIR:-.cache/logkit-tiny-llama}")
  nprocs="${MULTI_PROCS:-2}"
  single_flags=()
  launch_flags=(--mixed_precision no)
  [ "$nprocs" -gt 1 ] && launch_flags+=(--multi_gpu)
  # one thread per rank: ranks that fight over a few cores run many times slower
  device_env=(CUDA_VISIBLE_DEVICES= OMP_NUM_THREADS=1)
fi

root="${SESSIONS_DIR:-sessions}/$session"
mkdir -p "$root"
for run in single_gpu multi_gpu; do
  if [ -e "$root/$run" ]; then
    rm -rf "$root/.previous/$run"
    mkdir -p "$root/.previous"
    mv "$root/$run" "$root/.previous/$run"
    echo "note: the previous $root/$run is now in $root/.previous/$run"
  fi
done

# Run one training (the args after the run folder), under monitor_gpu unless MONITOR=0.
run_training() {
  local out="$1"
  shift
  local cmd=("$@" "${model_args[@]}" --session-name "$session" --config-name "$config" --log-dir "$out/logs"
             --output-dir "$out"
             ${extra[@]+"${extra[@]}"})
  mkdir -p "$out"
  if [ "${MONITOR:-1}" != "0" ]; then
    cmd=("$py" -m trainer_hooks.monitor --output "$out/gpu_usage.jsonl" --interval "${MONITOR_INTERVAL:-5}"
         --monitor-training "$(printf '%q ' "${cmd[@]}")")
  fi
  local status=0
  env ${device_env[@]+"${device_env[@]}"} PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}" "${cmd[@]}" \
    >"$out/train.log" 2>&1 || status=$?
  if [ "$status" -ne 0 ]; then
    echo "complete_training_pipeline: training failed (exit $status); last lines of $out/train.log:" >&2
    tail -n 30 "$out/train.log" >&2
    exit "$status"
  fi
  echo "    results: $out/results.json"
}

device_words="CPU"
[ "$gpus" -gt 0 ] && device_words="$gpus GPU(s)"
echo "==> session $session, config $config, on $device_words"
echo "==> [1/3] single process"
run_training "$root/single_gpu" "$py" "$train" ${single_flags[@]+"${single_flags[@]}"}

port=$("$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
echo "==> [2/3] $nprocs processes (accelerate launch)"
run_training "$root/multi_gpu" "${launch[@]}" "${launch_flags[@]}" --num_processes "$nprocs" --num_machines 1 \
  --dynamo_backend no --main_process_port "$port" "$train"

echo "==> [3/3] analyze_logs --compare $root"
"${analyze[@]}" "$root" --compare --report="$root/report.html" | tee "$root/comparison.txt"
