#!/usr/bin/env bash
# data.format text and tokens (Note [token windows]): a small GPT learns the fortune databases
# byte by byte under mpirun -np 2 (test loss well below a uniform guess, ln 256 = 5.55); the same
# bytes as nanoGPT's train.bin / val.bin (flat uint16) and as llm.c shards (header + uint16)
# train from a glob; and every malformed file is an error naming the file and the offset.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
e2e_setup token_data
py=${DTRAIN_REF_PYTHON:-/usr/bin/python3}
fort=/usr/share/games/fortunes
[[ -f $fort/computers ]] || fail "$fort/computers is missing: install Debian's fortunes package (launch/setup.sh does)"
small=(model.n_layer=2 model.n_embd=64 model.n_head=4 model.seq_len=64 data.windows=3072
       train.epochs=1 train.global_batch=32 train.warmup_steps=10 run.log_every=0
       run.dir="$tmp/runs" data.workers=1)

# 1. text under two ranks
run 300 text "$mpiexec" "${mpi_flags[@]}" -np 2 "$bin" "$src/configs/text_gpt.yaml" "${small[@]}"
[[ $rc == 0 ]] || { show text; fail "text: exit $rc"; }
loss=$(sed -nE 's/^final test accuracy: [0-9.]+%(, top-5 [0-9.]+%)? \(loss ([0-9.eE+-]+),.*/\2/p' "$tmp/text.out" | tail -n 1)
[[ -n $loss ]] || { show text; fail "text: no 'final test accuracy: N% (loss L, ...)' line"; }
awk -v l="$loss" 'BEGIN { exit !(l < 3.6) }' || fail "text: final test loss $loss is not below 3.6 (uniform: 5.55)"
echo "ok: text, final test loss $loss (uniform guess 5.55)"

# 2. the same bytes as token files: nanoGPT's flat uint16 and llm.c's shards (two, by glob)
mkdir -p "$tmp/tok"
"$py" - "$fort/computers" "$tmp/tok" <<'PY' || fail "could not write the token files"
import array, struct, sys
data = open(sys.argv[1], "rb").read()
out = sys.argv[2]
cut = len(data) * 9 // 10
def flat(path, b):
    array.array("H", list(b)).tofile(open(path, "wb"))
flat(out + "/train.bin", data[:cut])
flat(out + "/val.bin", data[cut:])
half = cut // 2
for i, part in enumerate((data[:half], data[half:cut])):
    with open(f"{out}/shard_train_{i:06d}.bin", "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, len(part), *([0] * 253)))
        array.array("H", list(part)).tofile(f)
# malformed: an odd byte count, a header that promises more tokens, a token out of range, empty
open(out + "/odd.bin", "wb").write(b"\x01\x00" * 100 + b"\x01")
with open(out + "/short.bin", "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, 500, *([0] * 253)))
    array.array("H", list(data[:300])).tofile(f)
array.array("H", list(data[:2000]) + [300] + list(data[2000:4000])).tofile(open(out + "/big.bin", "wb"))
open(out + "/empty.bin", "wb").close()
PY
tok=(data.format=tokens data.path="$tmp/tok" model.vocab_size=256 train.max_steps=30)
run 300 nanogpt "$bin" "$src/configs/text_gpt.yaml" "${small[@]}" "${tok[@]}" run.name=nanogpt data.train_files=train.bin data.test_files=val.bin
[[ $rc == 0 ]] || { show nanogpt; fail "nanoGPT files: exit $rc"; }
grep -q "^final test accuracy" "$tmp/nanogpt.out" || { show nanogpt; fail "nanoGPT files: no evaluation"; }
run 300 llmc "$bin" "$src/configs/text_gpt.yaml" "${small[@]}" "${tok[@]}" run.name=llmc "data.train_files=shard_train_*.bin" data.test_files=val.bin
[[ $rc == 0 ]] || { show llmc; fail "llm.c shards: exit $rc"; }
grep -q "tokens: 2 files" "$tmp/llmc.out" "$tmp/llmc.err" || { show llmc; fail "llm.c shards: the glob did not give 2 files"; }
echo "ok: nanoGPT's flat uint16 files and llm.c's shards train"

# 3. bad files: each an error naming the file (and offset), non-zero exit
expect_error() {  # NAME OVERRIDE PATTERN...
  local name=$1 override=$2
  shift 2
  run 120 "$name" "$bin" "$src/configs/text_gpt.yaml" "${small[@]}" "${tok[@]}" run.name="$name" "$override"
  [[ $rc != 0 ]] || fail "$name: exit 0"
  for p in "$@"; do grep -qF -- "$p" "$tmp/$name.err" || { show "$name"; fail "$name: no '$p' in the error"; }; done
  echo "ok: $name: $(grep -m1 error "$tmp/$name.err")"
}
expect_error odd data.train_files=odd.bin "odd.bin" "truncated at byte offset 200" "data.train_files"
expect_error short data.train_files=short.bin "short.bin" "header says 500 tokens, the file holds 300" "truncated"
expect_error empty data.train_files=empty.bin "empty file" "empty.bin"
expect_error nomatch "data.train_files=nothing_*.bin" "no file matches" "nothing_*.bin"
expect_error range "data.train_files=big.bin" "big.bin" "token 300 at token index 2000" "vocabulary [0, 256)"
