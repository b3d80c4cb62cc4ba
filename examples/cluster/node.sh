#!/usr/bin/env bash
# Starts one node of the cluster example (examples/cluster/run.sh, `make
# example-cluster`) in the background and returns once it is ready:
#
#   examples/cluster/node.sh node-a|node-b|node-c
#
# The node runs `statefun run` in cluster mode with the module run.sh wrote,
# on the development Kafka run.sh started, with its data directory, log and
# pid file in the cluster directory (data/cluster by default). run.sh starts
# all three with it; run it yourself to start again a node you stopped or
# killed: it takes the same node id and data directory, so it rejoins the
# application. run.sh's Ctrl-C stops it too (it reads the pid files).
#
# Environment: BIN_DIR (default bin), CLUSTER_DIR (default data/cluster),
# ADMIN_PORTS (default "8071 8072 8073": the admin listeners of node-a,
# node-b and node-c).
set -euo pipefail
cd "$(dirname "$0")/../.."

bin="${BIN_DIR:-bin}"
dir="${CLUSTER_DIR:-data/cluster}"
read -r -a ports <<<"${ADMIN_PORTS:-8071 8072 8073}"
node="${1:-}"
case "$node" in
  node-a) port="${ports[0]}" ;;
  node-b) port="${ports[1]}" ;;
  node-c) port="${ports[2]}" ;;
  *) echo "node.sh: want node-a, node-b or node-c, not '$node'" >&2; exit 2 ;;
esac
if [ ! -s "$dir/brokers" ] || [ ! -f "$dir/module.yaml" ]; then
  echo "node.sh: $dir has no brokers or module.yaml: start the cluster with examples/cluster/run.sh (make example-cluster) first" >&2
  exit 1
fi
if [ -f "$dir/$node.pid" ] && kill -0 "$(cat "$dir/$node.pid")" 2>/dev/null; then
  echo "node.sh: $node is running already (pid $(cat "$dir/$node.pid"))" >&2
  exit 1
fi
admin="127.0.0.1:$port"

# Every node: the same brokers and application id; its own node id, data
# directory and admin URL, which the other nodes probe to find it down.
# 12 partitions: an equal share for 1, 2, 3, 4 or 6 nodes.
# A session of its own (setsid): Ctrl-C in run.sh's terminal reaches run.sh
# alone, which stops the nodes before devkafka.
detach=()
command -v setsid >/dev/null && detach=(setsid)
"${detach[@]}" "$bin/statefun" run --module "$dir/module.yaml" --data-dir "$dir/$node" \
  --admin-addr "$admin" \
  --cluster-brokers "$(cat "$dir/brokers")" --cluster-app-id greeter \
  --cluster-node-id "$node" --cluster-advertise "http://$admin" \
  --cluster-partitions 12 \
  >>"$dir/$node.log" 2>&1 &
pid=$!
echo "$pid" >"$dir/$node.pid"

for _ in $(seq 600); do
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "node.sh: $node stopped; the end of its log ($dir/$node.log):" >&2
    tail -n 20 "$dir/$node.log" >&2
    exit 1
  fi
  if curl -fsS "http://$admin/readyz" >/dev/null 2>&1; then
    echo "$node ready: pid $pid, admin http://$admin, log $dir/$node.log"
    exit 0
  fi
  sleep 0.1
done
echo "node.sh: $node is not ready after 60s: $(curl -sS "http://$admin/readyz" 2>&1)" >&2
exit 1
