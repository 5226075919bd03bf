#!/usr/bin/env bash
# The forecast validated on a host where each rank has its own core (a 16-core GPU machine, CPU ranks only):
#   1. the real-compute workload (benchmarks/real_compute_trainer.py): strong and weak regimes, a 2 MB and a
#      16 MB model, fitted on 1 and 2 ranks, forecasting 3, 4, 6 and 8, each measured (about 5 minutes);
#   2. the tiny QLoRA (examples/train_qlora.py --tiny, 4-bit bitsandbytes + peft LoRA): 1 and 2 ranks
#      forecasting 3 (about 1-2 minutes); skipped, saying what is missing, where bitsandbytes or peft cannot
#      be imported (put them on PYTHONPATH).
# Each row is printed as it is measured; OUT/real/ and OUT/qlora/ get table.md, rows.json, and per
# configuration the runs' logs and the CLI's JSON (fit.json, forecast.json, n3.json...).
#
#   benchmarks/gpu/forecast_device.sh OUT_DIR
#   STEPS=8 REAL_RANKS=1,2,3 REAL_CONFIGS=strong-large QLORA_STEPS=8 benchmarks/gpu/forecast_device.sh OUT_DIR
#
# Settings (environment): PYTHON (default python), STEPS (30), THREADS (1 per rank), REAL_RANKS (1,2,3,4,6,8),
# REAL_CONFIGS (all four, comma-separated), REAL_LIMIT_S (300), QLORA_STEPS (30), QLORA_RANKS (1,2,3),
# QLORA_LIMIT_S (150): a workload past its limit stops the run under way and keeps the rows measured. Exit status: 0 when both workloads ran and met the bar, else 1.
set -u
OUT=${1:?usage: benchmarks/gpu/forecast_device.sh OUT_DIR}
PYTHON=${PYTHON:-python}
STEPS=${STEPS:-30}
THREADS=${THREADS:-1}
REAL_RANKS=${REAL_RANKS:-1,2,3,4,6,8}
REAL_CONFIGS=${REAL_CONFIGS:-strong-small,strong-large,weak-small,weak-large}
REAL_LIMIT_S=${REAL_LIMIT_S:-300}
QLORA_STEPS=${QLORA_STEPS:-30}
QLORA_RANKS=${QLORA_RANKS:-1,2,3}
QLORA_LIMIT_S=${QLORA_LIMIT_S:-150}

cd "$(dirname "$0")/../.." || exit 1
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
export CUDA_VISIBLE_DEVICES=""  # CPU ranks (gloo), whatever the machine's accelerators
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

echo "== host: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $("$PYTHON" -V 2>&1)"
"$PYTHON" - <<'EOF' 2>&1 | tee "$OUT/environment.txt"
import importlib
for name in ("torch", "accelerate", "transformers", "bitsandbytes", "peft"):
    try:
        module = importlib.import_module(name)
        print(f"{name} {getattr(module, '__version__', '?')}")
    except Exception as exc:  # what is missing is said, and the rest goes on
        print(f"{name} MISSING ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})")
EOF

status=0
only=()
IFS=, read -ra names <<<"$REAL_CONFIGS"
for name in "${names[@]}"; do only+=(--only "$name"); done
echo "== real compute: ranks $REAL_RANKS, $THREADS thread(s) per rank, $STEPS steps, at most $REAL_LIMIT_S s"
start=$SECONDS
timeout "$((REAL_LIMIT_S + 60))" "$PYTHON" benchmarks/forecast_validation.py --out "$OUT" --workload real --budget "$REAL_LIMIT_S" \
    --ranks "$REAL_RANKS" --threads-per-rank "$THREADS" --steps "$STEPS" "${only[@]}" 2>&1 | tee "$OUT/real.log"
rc=${PIPESTATUS[0]}
echo "== real compute: exit $rc after $((SECONDS - start)) s$([ "$rc" = 124 ] && echo ' (time limit: the rows above are what was measured)')"
[ "$rc" = 0 ] || status=1

echo "== tiny QLoRA: ranks $QLORA_RANKS, $QLORA_STEPS steps, at most $QLORA_LIMIT_S s"
start=$SECONDS
timeout "$((QLORA_LIMIT_S + 60))" "$PYTHON" benchmarks/forecast_validation.py --out "$OUT" --workload qlora --budget "$QLORA_LIMIT_S" \
    --ranks "$QLORA_RANKS" --threads-per-rank "$THREADS" --steps "$QLORA_STEPS" 2>&1 | tee "$OUT/qlora.log"
rc=${PIPESTATUS[0]}
case $rc in
  0) ;;
  2) echo "== tiny QLoRA: not run (see the line above: what is missing)"; status=1 ;;
  *) echo "== tiny QLoRA: exit $rc after $((SECONDS - start)) s"; status=1 ;;
esac
echo "== tables: $OUT/real/table.md $OUT/qlora/table.md"
exit $status
