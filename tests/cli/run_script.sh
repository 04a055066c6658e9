#!/bin/sh
# hodu run-script through the command line: a program saves a script and
# its inputs, the CLI runs the script (printing the outputs or writing them
# to a file), and every error has its exit status: 1 for files that are
# missing or damaged and for unknown inputs, 2 for usage errors.
# usage: run_script.sh HODU
HODU=$1
DIR=$(mktemp -d /tmp/hodu_run_script_XXXXXX) || exit 2
trap 'rm -rf "$DIR"' EXIT
. "$(dirname "$0")/checks.sh"

cat > "$DIR/make.hodu" <<'HODU'
let dir = args()[0]
let w = tensor([[1.0], [2.0], [3.0]])
let s = script("linreg") {
    let x = input("x", [2, 3])
    let y = input("y", [2, 1])
    let p = x @ w
    output("pred", p)
    output("loss", mean((p - y) ** 2))
}
s.save(dir + "/linreg.hoduscript")
let one = script("double") { output("y", input("x", [3]) * 2) }
one.save(dir + "/double.hoduscript")
save(dir + "/x.npy", tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]]))
save(dir + "/y.npy", tensor([[1.0], [5.0]]))
save(dir + "/v.npy", tensor([1.0, 2.0, 3.0]))
save(dir + "/bad_shape.npy", tensor([1.0, 2.0]))
HODU
"$HODU" "$DIR/make.hodu" "$DIR"
check make 0 $?

# print the outputs
"$HODU" run-script "$DIR/linreg.hoduscript" --input "x=$DIR/x.npy" --input "y=$DIR/y.npy" \
    > "$DIR/out.txt" 2>&1
check print 0 $?
contains print "$DIR/out.txt" "pred = tensor([[1.],"
contains print "$DIR/out.txt" "        [6.]])"
contains print "$DIR/out.txt" "loss = tensor(0.5000)"

# write them to .npz, .safetensors and (one output) .npy, and read them back
"$HODU" run-script "$DIR/linreg.hoduscript" --input "x=$DIR/x.npy" --input "y=$DIR/y.npy" \
    --output "$DIR/out.npz" --compiler interp --device cpu
check npz 0 $?
"$HODU" run-script "$DIR/linreg.hoduscript" --input "x=$DIR/x.npy" --input "y=$DIR/y.npy" \
    --output "$DIR/out.safetensors"
check safetensors 0 $?
"$HODU" run-script "$DIR/double.hoduscript" --input "x=$DIR/v.npy" --output "$DIR/out.npy"
check npy 0 $?
"$HODU" -e "let d = \"$DIR\"
print(load(d + \"/out.npz\").loss, load(d + \"/out.safetensors\").pred.T, load(d + \"/out.npy\"))" \
    > "$DIR/back.txt" 2>&1
check read_back 0 $?
contains read_back "$DIR/back.txt" "tensor(0.5000) tensor([[1., 6.]]) tensor([2., 4., 6.])"

# errors of the script or its files: status 1
run1() { # name, expected text, arguments...
    name=$1
    text=$2
    shift 2
    "$HODU" run-script "$@" > "$DIR/err.txt" 2>&1
    check "$name" 1 $?
    contains "$name" "$DIR/err.txt" "$text"
}
run1 unknown_input "script 'linreg' has no input 'z' (inputs: x, y)" \
    "$DIR/linreg.hoduscript" --input "z=$DIR/x.npy"
run1 missing_input "script 'linreg': input 'y' (f32[2, 1]) is not set" \
    "$DIR/linreg.hoduscript" --input "x=$DIR/x.npy"
run1 wrong_shape "input 'x' expects f32[3], got f32[2]" \
    "$DIR/double.hoduscript" --input "x=$DIR/bad_shape.npy"
run1 missing_script "$DIR/nope.hoduscript" "$DIR/nope.hoduscript"
run1 missing_npy "$DIR/nope.npy" "$DIR/double.hoduscript" --input "x=$DIR/nope.npy"
run1 not_a_script "not a .hoduscript file" "$DIR/x.npy"
head -c 100 "$DIR/linreg.hoduscript" > "$DIR/cut.hoduscript"
run1 truncated "cut.hoduscript" "$DIR/cut.hoduscript"
run1 npy_many "a .npy file holds one tensor and the script has 2 outputs" \
    "$DIR/linreg.hoduscript" --input "x=$DIR/x.npy" --input "y=$DIR/y.npy" \
    --output "$DIR/o.npy"
run1 unknown_compiler "unknown compiler 'fast'" "$DIR/double.hoduscript" --compiler fast

# usage errors: status 2
run2() { # name, arguments...
    name=$1
    shift
    "$HODU" run-script "$@" > "$DIR/err.txt" 2>&1
    check "$name" 2 $?
    contains "$name" "$DIR/err.txt" "usage: hodu run-script"
}
run2 no_script
run2 bad_input_spec "$DIR/double.hoduscript" --input x
run2 no_value "$DIR/double.hoduscript" --input
run2 unknown_option "$DIR/double.hoduscript" --fast
"$HODU" run-script --help > "$DIR/help.txt" 2>&1
check help 0 $?
contains help "$DIR/help.txt" "--input NAME=FILE"

# a training loop with state: two runs with --state go on from each other,
# as eager training of the same 40 steps does
cat > "$DIR/train.hodu" <<'HODU'
import nn
import optim
let dir = args()[0]
manual_seed(5)
let xs = randn([50, 3])
let ys = xs @ tensor([[1.0], [-2.0], [0.5]]) + 0.3
save(dir + "/xs.npy", xs)
save(dir + "/ys.npy", ys)
manual_seed(9)
let model = nn.Linear(3, 1)
let opt = optim.Adam(model.parameters(), lr = 0.05)
let s = script("train") {
    let x = input("x", [50, 3])
    let y = input("y", [50, 1])
    let loss = none
    for e in 0..20 {
        opt.zero_grad()
        loss = mse(model(x), y)
        loss.backward()
        opt.step()
    }
    output("loss", loss)
}
s.set_input("x", xs)
s.set_input("y", ys)
s.run()
s.save(dir + "/train.hoduscript")
# the eager reference: 20 steps done above, then 40 more
for e in 0..40 {
    opt.zero_grad()
    let loss = mse(model(xs), ys)
    loss.backward()
    opt.step()
}
save(dir + "/ref.safetensors", {"weight": model.weight, "bias": model.bias, "m": opt.m[0]})
HODU
"$HODU" "$DIR/train.hodu" "$DIR" > "$DIR/out.txt" 2>&1
check make_train 0 $?
for k in 1 2; do
    "$HODU" run-script "$DIR/train.hoduscript" --input x="$DIR/xs.npy" --input y="$DIR/ys.npy" \
        --state "$DIR/state.safetensors" > "$DIR/out.txt" 2>&1
    check "state_run_$k" 0 $?
done
cat > "$DIR/cmp.hodu" <<'HODU'
let dir = args()[0]
let st = load(dir + "/state.safetensors")
let ref = load(dir + "/ref.safetensors")
fn close(a, b) { return (abs(a - b) - 1e-5 * (abs(b) + 1e-3)).max().item() <= 0 }
print(close(st["model.weight"], ref.weight), close(st["model.bias"], ref.bias),
      close(st["opt.m[0]"], ref.m), st["opt.t"].item())
HODU
"$HODU" "$DIR/cmp.hodu" "$DIR" > "$DIR/cmp.txt" 2>&1
check state_compare 0 $?
contains state_compare "$DIR/cmp.txt" "true true true 60"
# a state file of the wrong shape, and --state on a script without state
cat > "$DIR/bad.hodu" <<'HODU'
let dir = args()[0]
let st = load(dir + "/state.safetensors")
st["model.weight"] = zeros([1, 4])
save(dir + "/bad.safetensors", st)
HODU
"$HODU" "$DIR/bad.hodu" "$DIR" > "$DIR/out.txt" 2>&1
"$HODU" run-script "$DIR/train.hoduscript" --input x="$DIR/xs.npy" --input y="$DIR/ys.npy" \
    --state "$DIR/bad.safetensors" > "$DIR/err.txt" 2>&1
check state_bad_shape 1 $?
contains state_bad_shape "$DIR/err.txt" "state 'model.weight' is f32[1, 3], got f32[1, 4]"
"$HODU" run-script "$DIR/double.hoduscript" --input "x=$DIR/v.npy" --state "$DIR/s.safetensors" \
    > "$DIR/err.txt" 2>&1
check state_none 1 $?
contains state_none "$DIR/err.txt" "has no state"

[ $fails -eq 0 ] && echo "run-script: all checks passed"
exit $((fails > 0))
