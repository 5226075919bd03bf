#!/usr/bin/env bash
# Launch the tiny QLoRA example on N CPU ranks with accelerate (gloo when N > 1).
# usage: examples/launch_tiny_qlora.sh N LOG_DIR OUTPUT_DIR [more train_qlora.py args]
set -euo pipefail
n=$1 log_dir=$2 out_dir=$3
shift 3
here="$(cd "$(dirname "$0")" && pwd)"
bin="${VENV_BIN:-$here/../.venv/bin}"
port=$("$bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
multi=()
[ "$n" -gt 1 ] && multi=(--multi_gpu)
# one thread per rank: on a small CPU box, ranks that fight over cores run 30x slower
OMP_NUM_THREADS=1 CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES-}" "$bin/accelerate" launch "${multi[@]}" \
  --num_processes "$n" --num_machines 1 --mixed_precision no --dynamo_backend no --main_process_port "$port" \
  "$here/train_qlora.py" --tiny --log-dir "$log_dir" --output-dir "$out_dir" "$@"
