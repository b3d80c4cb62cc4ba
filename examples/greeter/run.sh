#!/usr/bin/env bash
# Runs the greeter example: the functions (bin/greeter, serving :8000) and the
# runtime (bin/statefun) with examples/greeter/module.yaml on the embedded
# store in data/greeter. `make example` builds both and runs this script.
# Ctrl-C stops both.
#
# Environment: BIN_DIR (default bin), GREETER_ADDR (default :8000; keep it in
# step with module.yaml), STATEFUN_DATA_DIR (default data/greeter).
set -euo pipefail
cd "$(dirname "$0")/../.."

bin="${BIN_DIR:-bin}"
for b in "$bin/greeter" "$bin/statefun"; do
  if [ ! -x "$b" ]; then
    echo "run.sh: $b is missing; run 'make build' first" >&2
    exit 1
  fi
done

GREETER_ADDR="${GREETER_ADDR:-:8000}" "$bin/greeter" &
greeter=$!
trap 'kill "$greeter" 2>/dev/null || true; wait "$greeter" 2>/dev/null || true' EXIT

"$bin/statefun" run --module examples/greeter/module.yaml --data-dir "${STATEFUN_DATA_DIR:-data/greeter}"
