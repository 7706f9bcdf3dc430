#!/usr/bin/env bash
# stage 2: the wheels Flower needs, then README's GPU line (Ray simulation, 8 clients sharing one GPU by 0.25)
set -u; T=/root/g; t0=$(date +%s); OUT=${OUT:-/tmp/out}; mkdir -p $OUT
[ -f $T/model/model.safetensors ] || { echo "stage 1 state is gone (machine not warm)"; exit 9; }
exec > >(tee $OUT/log.txt) 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target $T/site .gpu2b/whl/*.whl 2>&1 | grep -v "already exists" | tail -5
export PATH=$T/site/bin:$PATH PYTHONPATH=$T/site:$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1 FLWR_HOME=$T/flwrhome
mkdir -p ../shared/data; [ -e ../shared/data/sst2 ] || ln -s $T/data/sst2 ../shared/data/sst2
mv .gpu2b $T/carried-b 2>/dev/null; rm -rf .gpu2a   # carried files out of the checkout (the FAB takes only pyproject's fab-include)
python3 -c "import sys, torch, transformers, flwr, ray; print(sys.version.split()[0], 'torch', torch.__version__, torch.cuda.get_device_name(0), 'transformers', transformers.__version__, 'flwr', flwr.__version__, 'ray', ray.__version__)" || exit 5
echo "setup s: $(( $(date +%s) - t0 ))"
nvidia-smi --query-gpu=timestamp,memory.used,utilization.gpu --format=csv,noheader -l 1 > $OUT/gpu-samples.csv 2>/dev/null & SMI=$!
s=$(date +%s)
timeout ${RUN1:-260} flwr run . --stream --run-config "device='cuda' precision='bf16'" \
  --federation-config "num-supernodes=8 client-resources-num-cpus=2 client-resources-num-gpus=0.25" > $OUT/flwr-run.txt 2>&1
echo "flwr run rc=$? s=$(( $(date +%s) - s ))"; tail -30 $OUT/flwr-run.txt
if [ $(( $(date +%s) - t0 )) -lt ${BUDGET2:-300} ]; then
  s=$(date +%s)
  timeout ${RUN2:-200} python3 -m simulations.simulate --num-supernodes 8 --gpus-per-client 0.25 \
    --run-config "method=fedbpt device=cuda precision=bf16 num-server-rounds=3 run-name=gpu-simulate" > $OUT/simulate.txt 2>&1
  echo "simulate rc=$? s=$(( $(date +%s) - s ))"; tail -15 $OUT/simulate.txt
fi
kill $SMI 2>/dev/null
find / -xdev -name rounds.jsonl -newer $T/model/model.safetensors -not -path "/proc/*" 2>/dev/null > $OUT/records.lst
cat $OUT/records.lst
tar czf $OUT/records.tgz $(sed 's#/rounds.jsonl##' $OUT/records.lst) 2>/dev/null
python3 - $OUT/records.lst <<'PY'
import json, sys
from pathlib import Path
for line in Path(sys.argv[1]).read_text().split():
    rec = Path(line).parent; print("==", rec.name)
    for l in (rec / "rounds.jsonl").read_text().splitlines():
        r = json.loads(l)
        print(" ", r["round"], "acc", r.get("global_accuracy"), "clients", r.get("num_clients"), "gpu MB", r.get("client_peak_gpu_mb"),
              "rss MB", r.get("client_peak_rss_mb"), "fit s", r.get("client_fit_s"), "round s", r.get("round_time_s"), "up", r.get("bytes_up"), "q", r.get("model_queries"))
    cfg = json.loads((rec / "config.json").read_text()); print("  device", cfg["config"].get("device"), "precision", cfg["config"].get("precision"))
PY
echo "total s: $(( $(date +%s) - t0 ))"
