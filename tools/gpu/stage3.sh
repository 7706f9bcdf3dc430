#!/usr/bin/env bash
# stage 3 (same warm machine, after stage 2): the methods that had never run on a GPU, and fp16's loss
# scaling, each 2 rounds through the Ray simulation with 8 clients sharing the GPU by 0.25; then
# README's GPU line again in fp32 (precision compared on the same machine).
set -u; T=/root/g; OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export PATH=$T/site/bin:$PATH PYTHONPATH=$T/site:$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1 FLWR_HOME=$T/flwrhome
rm -rf .gpu2a .gpu2b   # carried files out of the checkout
for spec in "feddf" "fedptuning-v2" "fedfsl-bias" "fedprompt precision=fp16" "fedavg precision=fp16" "fedlora"; do
  set -- $spec; m=$1; shift; s=$(date +%s)
  timeout 90 python3 -m simulations.simulate --num-supernodes 8 --gpus-per-client 0.25 \
    --run-config "method=$m device=cuda num-server-rounds=2 run-name=gpu2-$m $*" > $OUT/sim-$m.txt 2>&1
  echo "== $m $* rc=$? s=$(( $(date +%s) - s ))"; grep "fedtext round" $OUT/sim-$m.txt
done
s=$(date +%s)
timeout 130 flwr run . --stream --run-config "device='cuda' precision='fp32'" \
  --federation-config "num-supernodes=8 client-resources-num-cpus=2 client-resources-num-gpus=0.25" > $OUT/flwr-fp32.txt 2>&1
echo "flwr run fp32 rc=$? s=$(( $(date +%s) - s ))"; grep "fedtext round" $OUT/flwr-fp32.txt
for r in runs/*; do echo "$r"; python3 -c "import json,sys; [print(' ', d['round'], d['global_accuracy'], d['num_clients'], d['client_peak_gpu_mb'], d['client_fit_s'], d['round_time_s'], d['bytes_up'], d['dropped']) for d in map(json.loads, open(sys.argv[1]+'/rounds.jsonl'))]" "$r"; done
