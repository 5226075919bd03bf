#!/usr/bin/env bash
# Regenerates the GPU fixtures (sample_logs/gpu/) on a machine with one CUDA GPU, with torch,
# transformers, peft, bitsandbytes, datasets and nvidia-ml-py importable by $PYTHON.
# usage: sample_logs/regenerate_gpu.sh [DEST]       (DEST defaults to sample_logs/gpu)
#
# What it runs, each a real run on the GPU:
#   qlora_single_gpu/  tiny Llama (1024 hidden, 8 layers) 4-bit NF4 + LoRA, bf16 compute, under
#                      `accelerate launch` on one process: pynvml sampling, no gradient sync
#   qlora_ultra/       the same at verbosity ultra under torchrun (an NCCL process group of one:
#                      accelerate wraps no DDP for one process, so there is no gradient sync):
#                      per-layer gradient norms, batch records, disk/network/temperatures
#   loop_monitored/    the hand-written accelerate loop (TrainingLogger) on one GPU, run by
#                      `monitor_gpu --monitor-training`, which writes gpu_monitor.jsonl beside it
# CUDA-event timing of an NCCL all-reduce is checked by tests/test_gpu.py on such a machine.
#   captures/          nvidia-smi --query-gpu CSV and nvidia-smi dmon taken during the runs
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
dest=${1:-sample_logs/gpu}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
tiny=(--tiny --tiny-dir "$work/tiny-llama" --tiny-hidden 1024 --tiny-layers 8 --batch-size 16 --seq-len 256)
mkdir -p "$work/captures"
status=0

nvidia-smi --query-gpu=timestamp,name,index,utilization.gpu,utilization.memory,memory.used,memory.total,temperature.gpu,power.draw,clocks.sm \
  --format=csv -lms 500 > "$work/captures/nvidia_smi_query.csv" 2>&1 &
smi=$!
echo "== qlora_single_gpu"
"$PYTHON" -m accelerate.commands.launch --num_processes 1 --num_machines 1 --mixed_precision no --dynamo_backend no \
  examples/train_qlora.py "${tiny[@]}" --max-steps 300 --log-dir "$work/qlora_single_gpu/logs" \
  --output-dir "$work/qlora_single_gpu/outputs" --session-name gpu || status=1
kill $smi 2>/dev/null

nvidia-smi dmon -s pucm -c 20 > "$work/captures/nvidia_smi_dmon.txt" 2>&1 &
dmon=$!
echo "== qlora_ultra"
"$PYTHON" -m torch.distributed.run --nproc_per_node 1 --master_port 29533 \
  examples/train_qlora.py "${tiny[@]}" --max-steps 200 --verbosity ultra --log-dir "$work/qlora_ultra/logs" \
  --output-dir "$work/qlora_ultra/outputs" --session-name gpu || status=1
wait $dmon 2>/dev/null || kill $dmon 2>/dev/null

echo "== loop_monitored"
mkdir -p "$work/loop_monitored"
"$PYTHON" -m trainer_hooks.monitor --output "$work/loop_monitored/gpu_monitor.jsonl" --interval 2 --sample-every 0.25 \
  --monitor-training "$PYTHON -m torch.distributed.run --nproc_per_node 1 --master_port 29534 examples/train_accelerate_loop.py --log-dir $work/loop_monitored/logs --steps 2000 --hidden 8192 --batch-size 64 --bucket-cap-mb 0.25 --log-setting gpu_snapshot_interval=2" \
  || status=1

rm -rf "$dest"
mkdir -p "$dest"
for d in qlora_single_gpu qlora_ultra loop_monitored captures; do
  [ -d "$work/$d" ] && cp -r "$work/$d" "$dest/"
done
# nothing of this machine's layout in the fixtures
grep -rl "$work/" "$dest" 2>/dev/null | xargs -r sed -i "s#$work/##g"
echo "GPU fixtures written to $dest (status $status)"
find "$dest" -type f | sort
exit $status
