#!/usr/bin/env bash
# Runs a three-node cluster on this machine with one command (`make
# example-cluster` builds the binaries, then runs this script):
#
#   1. devkafka, the development Kafka (franz-go kfake, three brokers on
#      127.0.0.1:9092-9094), with the topics user-logins (6 partitions) and
#      greetings;
#   2. the kafka-greeter functions (bin/kafka-greeter) on :8000;
#   3. three `statefun run` nodes in cluster mode, node-a, node-b and node-c,
#      sharing the application "greeter" (12 partitions), with the
#      kafka-greeter example's module.yaml; admin listeners on
#      127.0.0.1:8071, 8072 and 8073 (examples/cluster/node.sh starts each);
#
# then leaves everything running until Ctrl-C, which stops every process it
# started, and every node started since with node.sh. Every run starts from
# an empty Kafka and empty stores in the cluster directory (data/cluster),
# which keeps the nodes' logs after the run.
#
# Environment: BIN_DIR (default bin), CLUSTER_DIR (default data/cluster),
# DEVKAFKA_PORT (default 9092; 0: any free ports), KAFKA_GREETER_ADDR
# (default :8000), ADMIN_PORTS (default "8071 8072 8073").
set -euo pipefail
cd "$(dirname "$0")/../.."

bin="${BIN_DIR:-bin}"
for b in "$bin/devkafka" "$bin/kafka-greeter" "$bin/statefun"; do
  if [ ! -x "$b" ]; then
    echo "run.sh: $b is missing; run 'make build' first" >&2
    exit 1
  fi
done
command -v curl >/dev/null || { echo "run.sh: curl is missing (it asks the nodes whether they are ready)" >&2; exit 1; }

dir="${CLUSTER_DIR:-data/cluster}"
export BIN_DIR="$bin" CLUSTER_DIR="$dir"
# A fresh start: remove what the last run left, but only a directory this
# script made (it holds module.yaml and brokers) or an empty one.
if [ -d "$dir" ] && [ -n "$(ls -A "$dir")" ]; then
  if [ ! -f "$dir/module.yaml" ] || [ ! -f "$dir/brokers" ]; then
    echo "run.sh: $dir is not empty and not the cluster directory of an earlier run; set CLUSTER_DIR to another directory" >&2
    exit 1
  fi
  for f in "$dir"/*.pid; do
    if [ -f "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null; then
      echo "run.sh: $(basename "$f" .pid) of an earlier run still runs (pid $(cat "$f")); stop it first" >&2
      exit 1
    fi
  done
  rm -rf "$dir"
fi
mkdir -p "$dir"

pids=()
cleanup() {
  # The nodes first (also those node.sh started since), then the
  # functions and devkafka.
  local nodes=()
  echo "run.sh: stopping the nodes, the functions and devkafka (the logs stay in $dir)" >&2
  for f in "$dir"/node-*.pid; do
    [ -f "$f" ] && nodes+=("$(cat "$f")")
  done
  for p in "${nodes[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${nodes[@]}"; do
    for _ in $(seq 150); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null || true
  done
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill "${pids[i]}" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -f "$dir"/*.pid
}
trap cleanup EXIT
trap 'exit 0' INT TERM HUP   # Ctrl-C is how this example ends

# Ctrl-C reaches this script alone: the processes it starts run in
# sessions of their own (setsid), so that cleanup stops the nodes while
# Kafka still answers them, and devkafka last.
detach=()
command -v setsid >/dev/null && detach=(setsid)

# 1. The development Kafka. Its first line on stdout is the bootstrap list.
"${detach[@]}" "$bin/devkafka" -port "${DEVKAFKA_PORT:-9092}" -topic user-logins:6 -topic greetings:3 >"$dir/devkafka.out" 2>"$dir/devkafka.log" &
pids+=($!)
echo "$!" >"$dir/devkafka.pid"
for _ in $(seq 100); do
  [ -s "$dir/devkafka.out" ] && break
  kill -0 "${pids[0]}" 2>/dev/null || { echo "run.sh: devkafka did not start (are ports 9092-9094 free?): $(cat "$dir/devkafka.log")" >&2; exit 1; }
  sleep 0.1
done
bootstrap="$(head -n1 "$dir/devkafka.out")"
[ -n "$bootstrap" ] || { echo "run.sh: devkafka printed no brokers" >&2; exit 1; }
# The nodes and the module's Kafka ingress and egress name the same
# brokers (cluster mode refuses others): the first one.
broker="${bootstrap%%,*}"
echo "$broker" >"$dir/brokers"

# 2. The functions, and the module pointed at them and at devkafka.
fnaddr="${KAFKA_GREETER_ADDR:-:8000}"
KAFKA_GREETER_ADDR="$fnaddr" "${detach[@]}" "$bin/kafka-greeter" 2>"$dir/functions.log" &
pids+=($!)
echo "$!" >"$dir/functions.pid"
sed -e "s/127\.0\.0\.1:9092/$broker/" -e "s#localhost:8000#localhost:${fnaddr##*:}#" \
  examples/kafka-greeter/module.yaml >"$dir/module.yaml"

echo "run.sh: devkafka on $bootstrap (not for production); functions on $fnaddr"
# 3. The nodes, one at a time: each joins the group and takes its share.
for n in node-a node-b node-c; do
  examples/cluster/node.sh "$n"
done

read -r -a ports <<<"${ADMIN_PORTS:-8071 8072 8073}"
cat <<MSG

run.sh: three nodes share the application "greeter"; the console: http://127.0.0.1:${ports[0]}/ui/
Try, in another terminal (docs/tutorials/cluster.md):
  echo 'bid|{"user_id": "bid", "user_name": "Bob", "login_type": "web"}' | kcat -P -b $broker -t user-logins -K '|'
  kcat -C -b $broker -t greetings -X isolation.level=read_committed -o beginning -e -q -f '%k: %s\n'
  curl -s 127.0.0.1:${ports[1]}/cluster        # which node serves which partitions
  kill -9 \$(cat $dir/node-c.pid)        # and examples/cluster/node.sh node-c to start it again
Ctrl-C stops everything.
MSG

# Until Ctrl-C, or devkafka or the functions stopping. A node that stops
# (killed on purpose) does not end the example.
set +e
wait -n "${pids[@]}"
echo "run.sh: devkafka or the functions stopped; stopping the nodes" >&2
exit 1
