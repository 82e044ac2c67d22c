#!/usr/bin/env bash
# make demo: an emulated trn1.32xlarge, one real process attached to 8 of its NeuronCores,
# and neuron-ls as a user would run it. Everything started here is stopped on exit.
set -euo pipefail
workdir=$(mktemp -d)
export NEURON_EMULATOR_ADDR="$workdir/neuron-emulator.sock"
holder=""
cleanup() {
  [ -n "$holder" ] && kill "$holder" 2>/dev/null && wait "$holder" 2>/dev/null || true
  neuron-emulator down >/dev/null 2>&1 || true
  rm -rf "$workdir"
}
trap cleanup EXIT

say() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }

say neuron-emulator up --instance-type trn1.32xlarge --detach
neuron-emulator up --instance-type trn1.32xlarge --detach

say "NEURON_RT_VISIBLE_CORES=0-7 python examples/hold_cores.py &"
mkfifo "$workdir/ready"
NEURON_RT_VISIBLE_CORES=0-7 NEURON_PROCESS_TAG=demo-app \
  python examples/hold_cores.py >"$workdir/ready" &
holder=$!
head -n 1 "$workdir/ready"

say neuron-ls
neuron-ls
say neuron-ls --wide
neuron-ls --wide
say neuron-ls --topology
neuron-ls --topology
say neuron-emulator status
neuron-emulator status
