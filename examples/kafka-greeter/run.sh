#!/usr/bin/env bash
# Runs the kafka-greeter example with one command (`make example-kafka`
# builds the binaries, then runs this script):
#
#   1. devkafka, the development Kafka (franz-go kfake), on 127.0.0.1:9092-9094,
#      with the topics user-logins and greetings;
#   2. the functions (bin/kafka-greeter) on :8000;
#   3. the runtime (bin/statefun) with examples/kafka-greeter/module.yaml on the
#      embedded store, in a fresh temporary directory;
#   4. produces the logins of logins.jsonl, keyed by user_id, and prints the
#      greetings read back read_committed;
#
# then leaves everything running until Ctrl-C. Uses kcat when installed,
# else the example's own producer and consumer (bin/kafka-greeter produce |
# consume). Every run starts from empty topics and an empty store.
#
# Environment: BIN_DIR (default bin), DEVKAFKA_PORT (default 9092; 0: any
# free ports), KAFKA_GREETER_ADDR (default :8000), STATEFUN_ADMIN_ADDR
# (default 127.0.0.1:8070). With other addresses than the defaults the
# runtime runs a copy of module.yaml pointed at them.
set -euo pipefail
cd "$(dirname "$0")/../.."

bin="${BIN_DIR:-bin}"
for b in "$bin/devkafka" "$bin/kafka-greeter" "$bin/statefun"; do
  if [ ! -x "$b" ]; then
    echo "run.sh: $b is missing; run 'make build' first" >&2
    exit 1
  fi
done

work="$(mktemp -d "${TMPDIR:-/tmp}/kafka-greeter.XXXXXX")"
pids=()
cleanup() {
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill "${pids[i]}" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 0' INT TERM   # Ctrl-C is how this example ends

# 1. The development Kafka. Its first line on stdout is the bootstrap list.
"$bin/devkafka" -port "${DEVKAFKA_PORT:-9092}" -topic user-logins -topic greetings >"$work/devkafka.out" &
pids+=($!)
for _ in $(seq 100); do
  [ -s "$work/devkafka.out" ] && break
  kill -0 "${pids[0]}" 2>/dev/null || { echo "run.sh: devkafka did not start (are ports 9092-9094 free?)" >&2; exit 1; }
  sleep 0.1
done
brokers="$(head -n1 "$work/devkafka.out")"
[ -n "$brokers" ] || { echo "run.sh: devkafka printed no brokers" >&2; exit 1; }
broker="${brokers%%,*}"

# 2. The functions.
fnaddr="${KAFKA_GREETER_ADDR:-:8000}"
KAFKA_GREETER_ADDR="$fnaddr" "$bin/kafka-greeter" &
pids+=($!)

# 3. The runtime, with the module pointed at devkafka and the functions.
module=examples/kafka-greeter/module.yaml
if [ "$broker" != 127.0.0.1:9092 ] || [ "${fnaddr##*:}" != 8000 ]; then
  sed -e "s/127\.0\.0\.1:9092/$broker/" -e "s#localhost:8000#localhost:${fnaddr##*:}#" "$module" >"$work/module.yaml"
  module="$work/module.yaml"
fi
admin="${STATEFUN_ADMIN_ADDR:-127.0.0.1:8070}"
"$bin/statefun" run --module "$module" --data-dir "$work/statefun" --admin-addr "$admin" &
runtime=$!
pids+=($runtime)
for _ in $(seq 300); do
  curl -fsS "http://$admin/readyz" >/dev/null 2>&1 && break
  kill -0 "$runtime" 2>/dev/null || { echo "run.sh: the runtime stopped" >&2; exit 1; }
  sleep 0.1
done
curl -fsS "http://$admin/readyz" >/dev/null || { echo "run.sh: the runtime is not ready: $(curl -sS "http://$admin/readyz")" >&2; exit 1; }

# 4. Logins in, greetings out.
logins=examples/kafka-greeter/logins.jsonl
n="$(grep -c . "$logins")"
echo
echo "== producing $n logins to user-logins ($logins)"
if command -v kcat >/dev/null; then
  sed -E 's/.*"user_id" *: *"([^"]*)".*/\1|&/' "$logins" | kcat -P -b "$brokers" -t user-logins -K '|'
else
  "$bin/kafka-greeter" produce -brokers "$brokers" -topic user-logins "$logins"
fi
echo "== greetings, read with isolation.level=read_committed (key: value)"
if command -v kcat >/dev/null; then
  timeout 60 kcat -C -b "$brokers" -t greetings -X isolation.level=read_committed -o beginning -c "$n" -q -f '%k: %s\n'
else
  "$bin/kafka-greeter" consume -brokers "$brokers" -topic greetings -n "$n" -timeout 60s
fi

cat <<MSG

== Everything keeps running; Ctrl-C stops it. Try:
  echo 'bid|{"user_id": "bid", "user_name": "Bob", "login_type": "web"}' | kcat -P -b $brokers -t user-logins -K '|'
  kcat -C -b $brokers -t greetings -X isolation.level=read_committed -o beginning -f '%k: %s\n'
  curl -s -H 'Accept: text/plain' http://$admin/state/showcase.fns/user/bid/seen_count   # Bob's login count (state API)
MSG
wait "$runtime"
