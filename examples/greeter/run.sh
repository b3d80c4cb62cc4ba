#!/usr/bin/env bash
# Runs the greeter example: the functions (bin/greeter, serving :8000) and the
# runtime (bin/statefun) with examples/greeter/module.yaml on the embedded
# store in data/greeter. `make example` builds both and runs this script.
# Ctrl-C stops both; so does either one stopping on its own.
#
# Environment: BIN_DIR (default bin), GREETER_ADDR (default :8000; keep it in
# step with the module), STATEFUN_MODULE (default examples/greeter/module.yaml),
# STATEFUN_DATA_DIR (default data/greeter).
set -euo pipefail
cd "$(dirname "$0")/../.."

bin="${BIN_DIR:-bin}"
for b in "$bin/greeter" "$bin/statefun"; do
  if [ ! -x "$b" ]; then
    echo "run.sh: $b is missing; run 'make build' first" >&2
    exit 1
  fi
done

addr="${GREETER_ADDR:-:8000}"
port="${addr##*:}"
GREETER_ADDR="$addr" "$bin/greeter" &
greeter=$!
runtime=""
stop() {
  [ -n "$runtime" ] && kill "$runtime" 2>/dev/null || true
  kill "$greeter" 2>/dev/null || true
  wait 2>/dev/null || true
}
trap stop EXIT

# The runtime starts only once the function server listens: if it cannot
# (the port is taken), the runtime would call whatever holds the port.
for _ in $(seq 50); do
  if ! kill -0 "$greeter" 2>/dev/null; then
    wait "$greeter" || true
    echo "run.sh: the greeter function server did not start (is port $port taken?); not starting the runtime" >&2
    exit 1
  fi
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    break
  fi
  sleep 0.1
done
sleep 0.2 # a server that lost the race for the port exits at once
if ! kill -0 "$greeter" 2>/dev/null; then
  echo "run.sh: the greeter function server did not start (is port $port taken?); not starting the runtime" >&2
  exit 1
fi
echo "run.sh: the greeter function serves on $addr; starting the runtime"

"$bin/statefun" run --module "${STATEFUN_MODULE:-examples/greeter/module.yaml}" --data-dir "${STATEFUN_DATA_DIR:-data/greeter}" &
runtime=$!

# Once the runtime is ready, say where to look and what to try.
admin="${STATEFUN_ADMIN_ADDR:-127.0.0.1:8070}"
if command -v curl >/dev/null; then
  for _ in $(seq 100); do
    kill -0 "$runtime" 2>/dev/null || break
    if curl -sf "http://$admin/readyz" >/dev/null 2>&1; then
      cat >&2 <<EOT

run.sh: ready. The console: http://$admin/ui/
Try, in another terminal:
  curl -X PUT -H "Content-Type: application/vnd.example/GreetRequest" -d '{"name": "Bob"}' localhost:8090/example/person/Bob
  curl localhost:8091/greetings
  curl -H "Accept: text/plain" $admin/state/example/person/Bob/visits
Ctrl-C stops both.

EOT
      break
    fi
    sleep 0.1
  done
fi
# Whichever stops first stops the other.
set +e
wait -n "$greeter" "$runtime"
status=$?
set -e
exit "$status"
