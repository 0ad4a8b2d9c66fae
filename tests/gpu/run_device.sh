#!/bin/bash
# Provenance of tests/fixtures/bundles/gpu-h200-*: the command that recorded them on 2x H200.
#
#   bash tests/gpu/run_device.sh [RECORD_DIR]     (from the repository root, on a 2-GPU machine)
#   HD_PYTEST_ARGS='-k broadcast-hang' HD_BENCH_ARGS='--skip-nvml' bash tests/gpu/run_device.sh ...
#
# Needs: python3 with torch (CUDA, NCCL), nvidia-ml-py, psutil, rich, typer, requests, numpy; Ray
# 2.60 with its dashboard and py-spy come from the wheels in .whl/ (installed to /tmp/site; see
# docs/gpu.md for the list). Runs the five GPU test programs under pytest (-m gpu) with the bundles
# kept in RECORD_DIR, then the measurements (bench_gpu.py), and packs everything into
# $OUT/gpu-record.tgz (or RECORD_DIR.tgz). The NVLink-multicast switches stay off throughout.
set -u
cd "$(dirname "$0")/../.."
REC=$(realpath -m "${1:-/tmp/hd-gpu-record}")
DEST=${OUT:-$(dirname "$REC")}
mkdir -p "$REC" "$DEST"
if ls .whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH
else
  export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 \
  NVSHMEM_DISABLE_NVLS=1 RAY_AUTH_MODE=disabled
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"; uname -a; nproc
  nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,memory.total --format=csv
  nvidia-smi topo -m
  python3 --version
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'nccl', '.'.join(map(str, torch.cuda.nccl.version())), 'gpus', torch.cuda.device_count())"
  python3 -c "import pynvml; pynvml.nvmlInit(); print('nvml driver', pynvml.nvmlSystemGetDriverVersion())"
  python3 -m pip show nvidia-ml-py 2>/dev/null | grep -i ^version
  ray --version; py-spy --version
  git log -1 --format='commit %H' 2>/dev/null
} > "$REC/versions.txt" 2>&1
cat "$REC/versions.txt"
HANGDOCTOR_GPU_RECORD=$REC timeout 430 python3 -m pytest -m gpu tests/gpu/test_gpu_programs.py \
  -v -p no:cacheprovider --timeout 400 ${HD_PYTEST_ARGS:-} 2>&1 | tee "$REC/pytest.log"
for f in "$REC"/runs/*.json; do
  python3 - "$f" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for name, r in d["runs"].items():
    v = r["verdict"] or {}
    c = (v.get("culprits") or [{}])[0]
    print(f"{d['program']:15} {name:12} rc={r['rc']} {r['wall_s']:5.1f}s {v.get('status')}/{v.get('stage')} "
          f"culprit rank={c.get('rank')} gpu={c.get('gpu')} pid={c.get('pid')} | gpu_of_rank={d['gpu_of_rank']}")
PY
done
timeout 200 python3 tests/gpu/bench_gpu.py --out "$REC/bench.json" --work "$REC/bench-work" \
  ${HD_BENCH_ARGS:-} > "$REC/bench.log" 2>&1
tail -c 3000 "$REC/bench.log"
rm -f "$REC"/*.tar.gz
cp "$REC/pytest.log" "$REC/bench.json" "$DEST/" 2>/dev/null
tar czf "$DEST/gpu-record.tgz" -C "$REC" . && ls -la "$DEST"
