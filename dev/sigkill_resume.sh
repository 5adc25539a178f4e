#!/bin/bash
# ~50 MB local corpus: an uninterrupted build, then a build killed with SIGKILL mid-way and run again.
set -u
cd "$(dirname "$0")/.."  # the repository root (run: bash dev/sigkill_resume.sh | tee results/train_cpu/sigkill_resume.log)
export HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1
D=${D:-$(mktemp -d -t sigkill_resume-XXXX)}; mkdir -p "$D"  # D=DIR: where (default: a new temporary folder)
[ -f $D/corpus50.jsonl ] || python -c "
import pathlib; from tests import test_prepare as T
T._corpus(pathlib.Path('$D/corpus50.jsonl'), 50)"
ls -l $D/corpus50.jsonl
ARGS="--dataset files:$D/corpus50.jsonl --num_proc 2 --progress 5 --shard_tokens 1000000"
rm -rf $D/whole $D/killed
/usr/bin/time -f "uninterrupted: %e s wall" python data.py $ARGS --cache_dir $D/whole
python data.py $ARGS --cache_dir $D/killed & PID=$!
T0=$(date +%s)
sleep 25
echo "--- kill -9 $PID after $(( $(date +%s) - T0 )) s"; kill -9 $PID; wait $PID; echo "exit status $?"
ls -l $D/killed/*.partial/ ; cat $D/killed/*.partial/manifest.json | head -30
/usr/bin/time -f "resumed run: %e s wall" python data.py $ARGS --cache_dir $D/killed
for s in train val; do cmp $D/whole/*/$s.bin $D/killed/*/$s.bin && echo "$s.bin identical"; sha256sum $D/whole/*/$s.bin $D/killed/*/$s.bin; done
ls -a $D/killed
