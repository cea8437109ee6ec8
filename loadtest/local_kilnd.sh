# Sourced (not run) by the scripts that start a kilnd of their own on loopback
# (loadtest/run.sh, loadtest/loadtest_test.sh, bench/v2_overhead.sh): a temporary folder
# $work, removed at exit together with the kilnd whose pid the script puts in $pid (SIGTERM,
# then waited for); free ports; and the model repository they serve.
work="$(mktemp -d)"
pid=""
kiln_local_cleanup() {
  if [ -n "$pid" ]; then kill -TERM "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap kiln_local_cleanup EXIT

# Sets grpc_port and http_port to two ports the kernel had free (bound to 0, then released).
pick_free_ports() {
  read -r grpc_port http_port < <(python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
}

# stage_models ROOT WANT_RESNET: $work/models with the example model and, when WANT_RESNET is
# 1 and ~/.cache/kiln/models/resnet18/model.onnx exists (tests/models/export_models.py
# writes it), resnet18; `models` lists what was staged.
stage_models() {
  local root=$1 want_resnet=$2
  local resnet="$HOME/.cache/kiln/models/resnet18/model.onnx"
  models=(example)
  mkdir -p "$work/models/example/1"
  cp "$root/config/models/example/1/model.onnx" "$work/models/example/1/"
  if [ "$want_resnet" = 1 ] && [ -f "$resnet" ]; then
    mkdir -p "$work/models/resnet18/1"
    cp "$resnet" "$work/models/resnet18/1/"
    models+=(resnet18)
  elif [ "$want_resnet" = 1 ]; then
    echo "$(basename "$0"): $resnet not found (tests/models/export_models.py writes it); example only" >&2
  fi
}
