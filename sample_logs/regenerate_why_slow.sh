#!/usr/bin/env bash
# Regenerates sample_logs/why_slow/: real runs of the hand-written loop example
# (examples/train_accelerate_loop.py) on CPU ranks (gloo), with the per-step phases the emitter
# times on every rank:
#   logs/  one rank, and two ranks where rank 1 loads each batch 50 ms slower (a data straggler)
#   hang/  two ranks where rank 1 stops before its gradient sync at step 10 (process-group
#          timeout 8 s, stall records after 3 s): rank 0 waits in the sync, then fails; torch's
#          Flight Recorder on (TORCH_FR_BUFFER_SIZE), dumped by each rank at its stall or error
# Run from anywhere: `make fixtures`.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=sample_logs/why_slow
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1 CUDA_VISIBLE_DEVICES=""
PY=${PY:-.venv/bin/python}
launch() {
  local n=$1; shift
  local multi=()
  [ "$n" -gt 1 ] && multi=(--multi_gpu)
  "$(dirname "$PY")/accelerate" launch "${multi[@]}" --num_processes "$n" --num_machines 1 --mixed_precision no \
    --dynamo_backend no --main_process_port "$("$PY" -c 'import socket; s=socket.socket(); s.bind(("",0)); print(s.getsockname()[1])')" \
    examples/train_accelerate_loop.py --steps 40 --hidden 1024 --batch-size 64 "$@"
}
launch 1 --log-dir "$work/logs"
sleep 1  # session ids are per second
launch 2 --log-dir "$work/logs" --slow-rank 1 --slow-data 0.05
TORCH_FR_BUFFER_SIZE=2000 launch 2 --log-dir "$work/hang" --slow-rank 1 --hang-at 10 --pg-timeout 8 --log-setting stall_min_s=3 || true
rm -rf "$dest"
mkdir -p "$dest"
cp -r "$work/logs" "$work/hang" "$dest/"
# the paths the runs recorded (stacks, tracebacks, the log folder): relative to the repository
sed -i -e "s#$work/##g" -e "s#$PWD/##g" "$dest"/*/*/*.{log,jsonl,json,txt} 2>/dev/null || true
# and in the Flight Recorder dumps (pickles: unpickled as plain data, paths cut, pickled again)
"$PY" - "$PWD/" "$dest"/hang/*/*.pkl <<'PYEOF'
import pickle, sys
from pathlib import Path
from logkit.ingest.readers.flight_recorder import load_dump
cut = sys.argv[1]
for name in sys.argv[2:]:
    path = Path(name)
    doc = load_dump(path.read_bytes())
    for entry in doc["entries"]:
        for frame in entry.get("frames") or []:
            frame["filename"] = str(frame.get("filename", "")).replace(cut, "")
    path.write_bytes(pickle.dumps(doc, protocol=path.read_bytes()[1]))
PYEOF
echo "fixtures written to $dest"
ls -R "$dest"
