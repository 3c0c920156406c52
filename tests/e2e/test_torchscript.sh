#!/usr/bin/env bash
# e2e: a model written in Python trains in dtrain (model.name torchscript). Debian's python3-torch
# scripts a small conv net with a fixed seed and saves it (torch.jit.script(net).save), writes a
# tiny IDX dataset, and trains the same net itself: plain SGD with momentum on the whole dataset
# as one batch (so the sample order does not matter), 20 steps. dtrain trains the saved module on
# 2 ranks (each a half of every batch, gradients averaged): 10 steps, a stop, then a second run
# that resumes from the checkpoint to step 20. The final model.pt holds the net's state_dict
# names, loads strictly into the Python net, and equals PyTorch's parameters within 1e-5. A
# model.path that is a state_dict, not a scripted module, is an error naming model.path.
# Env (set by ctest; defaults for a manual run): DTRAIN_BIN, DTRAIN_SOURCE_DIR, DTRAIN_MPIEXEC,
# DTRAIN_MPI_FLAGS, DTRAIN_REF_PYTHON.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
e2e_setup torchscript
e2e_torch_python

cat >"$tmp/net.py" <<'PY'
import torch

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.features = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.ReLU())
        self.head = torch.nn.Sequential(torch.nn.Linear(4 * 3 * 3, 16), torch.nn.Tanh(),
                                        torch.nn.Linear(16, 3))

    def forward(self, x):
        return self.head(self.features(x).flatten(1))
PY

"$py" - "$tmp" <<'PY' || fail "the PyTorch side failed"
import struct, sys
import torch
out = sys.argv[1]
sys.path.insert(0, out)
from net import Net

torch.manual_seed(0)
n, steps = 48, 20
labels = torch.arange(n, dtype=torch.uint8) % 3
images = torch.randint(0, 156, (n, 5, 5), dtype=torch.uint8)
images[torch.arange(n), labels.long() + 1, :] += 100  # class c: row c + 1 is brighter

def write_idx(path, t):  # IDX: 0, 0, type 0x08 (uint8), rank; big-endian int32 dims; the bytes
    with open(path, "wb") as f:
        f.write(bytes([0, 0, 8, t.dim()]))
        for d in t.shape:
            f.write(struct.pack(">i", d))
        f.write(bytes(t.flatten().tolist()))

write_idx(out + "/images.idx", images)
write_idx(out + "/labels.idx", labels)

net = Net()
torch.jit.script(net).save(out + "/net.pt")
torch.save(net.state_dict(), out + "/state_dict.pt")

# dtrain's IDX reader with data.normalize false: pixels / 255 as float32, (N, 1, H, W).
x = images.float().div(255.0).reshape(n, 1, 5, 5)
y = labels.long()
opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
for step in range(steps):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(net(x), y)
    loss.backward()
    opt.step()
torch.save(net.state_dict(), out + "/python.pt")
print("python: loss %.4f at step %d" % (loss.item(), steps))
assert loss.item() < 0.9, "the reference did not learn (loss %g; ln 3 = 1.10)" % loss.item()
PY

cat >"$tmp/ts.yaml" <<EOF
run: {name: ts, dir: "$tmp/runs", log_every: 1}
model: {name: torchscript, path: "$tmp/net.pt"}
data: {format: idx, path: "$tmp", train_images: images.idx, train_labels: labels.idx,
       test_images: images.idx, test_labels: labels.idx, normalize: false, workers: 0}
train: {epochs: 20, global_batch: 48, optimizer: sgd, lr: 0.1, momentum: 0.9,
        loss: cross_entropy}
EOF

run 180 first "$mpiexec" "${mpi_flags[@]}" -np 2 "$bin" "$tmp/ts.yaml" train.max_steps=10
[[ $rc == 0 ]] || { show first; fail "first run: exited with code $rc"; }
ls "$tmp/runs/ts/checkpoints" | grep -q 'step-000000010' ||
  { show first; fail "first run: no checkpoint of step 10 in $tmp/runs/ts/checkpoints"; }
run 180 resumed "$mpiexec" "${mpi_flags[@]}" -np 2 "$bin" "$tmp/ts.yaml"
[[ $rc == 0 ]] || { show resumed; fail "resumed run: exited with code $rc"; }
grep -q "resumed from .*step-000000010 at step 10" "$tmp/resumed.out" ||
  { show resumed; fail "resumed run: no 'resumed from ... at step 10' line"; }
echo "ok: 2 ranks trained the scripted module to step 10, stopped, and resumed to step 20"

"$py" - "$tmp" <<'PY' || fail "dtrain's parameters differ from PyTorch's"
import sys
import torch
out = sys.argv[1]
sys.path.insert(0, out)
from net import Net
mine = torch.load(out + "/runs/ts/model.pt")
ref = torch.load(out + "/python.pt")
start = torch.load(out + "/state_dict.pt")
assert list(mine) == list(ref), (list(mine), list(ref))
Net().load_state_dict(mine)  # strict: the state_dict names of the Python module
worst = max(float((mine[k] - ref[k]).abs().max()) for k in ref)
moved = min(float((ref[k] - start[k]).abs().max()) for k in ref)
print("max |dtrain - pytorch| = %.3g over %d tensors (each moved by >= %.3g in training)"
      % (worst, len(ref), moved))
assert moved > 1e-3, "the reference did not train"
assert worst < 1e-5, worst
PY
echo "ok: model.pt equals the parameters PyTorch trained"

run 120 not_scripted "$mpiexec" "${mpi_flags[@]}" -np 2 "$bin" "$tmp/ts.yaml" \
  model.path="$tmp/state_dict.pt" run.name=bad
[[ $rc == 1 ]] || { show not_scripted; fail "a state_dict as model.path: exit code $rc, not 1"; }
grep -q "error: model.path=$tmp/state_dict.pt: not a TorchScript archive" "$tmp/not_scripted.err" ||
  { show not_scripted; fail "a state_dict as model.path: no error naming model.path"; }
echo "ok: a state_dict as model.path is an error naming model.path"
