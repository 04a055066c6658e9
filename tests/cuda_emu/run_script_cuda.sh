#!/bin/sh
# hodu run-script --device cuda:0 (on the emulated device): inputs read
# from files move to the device, outputs come back to be printed or
# written, and the values are the cpu run's.
# usage: run_script_cuda.sh HODU
HODU=$1
DIR=$(mktemp -d /tmp/hodu_run_script_cuda_XXXXXX) || exit 2
trap 'rm -rf "$DIR"' EXIT
cat > "$DIR/make.hodu" <<'HODU'
let dir = args()[0]
let w = tensor([[1.0, -2.0], [3.0, 0.5], [-1.0, 1.0]])
let s = script("head") {
    let x = input("x", [4, 3])
    output("y", softmax(tanh(x @ w) * 2))
    output("n", sum(x * x, axis = 1))
}
s.save(dir + "/head.hoduscript")
manual_seed(1)
save(dir + "/x.npy", randn([4, 3]))
HODU
"$HODU" "$DIR/make.hodu" "$DIR" || { echo "FAIL: make"; exit 1; }
for dev in cpu cuda:0; do
    comp=interp
    [ "$dev" = cuda:0 ] && comp=cuda
    "$HODU" run-script "$DIR/head.hoduscript" --input "x=$DIR/x.npy" --device "$dev" \
        --compiler "$comp" --output "$DIR/out-$comp.npz" || { echo "FAIL: run on $dev"; exit 1; }
done
cat > "$DIR/check.hodu" <<'HODU'
let dir = args()[0]
let a = load(dir + "/out-interp.npz")
let b = load(dir + "/out-cuda.npz")
for k in ["y", "n"] {
    assert(b[k].device == "cpu", "written from host memory")
    assert(max(abs(a[k] - b[k])).item() <= 1e-5 * max(abs(a[k])).item(), k + " differs")
}
HODU
"$HODU" "$DIR/check.hodu" "$DIR" || { echo "FAIL: outputs differ"; exit 1; }
out=$("$HODU" run-script "$DIR/head.hoduscript" --input "x=$DIR/x.npy" --device cuda:0 2>&1)
case "$out" in
*'device="cuda:0"'*) ;;
*) echo "FAIL: printed outputs: $out"; exit 1 ;;
esac
echo "run-script on cuda: ok"
