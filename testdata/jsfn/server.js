// A remote function server built with the official StateFun JavaScript SDK
// (npm apache-flink-statefun 3.3.0), used by the Go runtime's end-to-end
// tests (internal/sdktest: StartJSServer, jsfn_test.go).
//
//   jsfn/counter  states seen (int) and last_name (string). Each message adds
//                 1 to seen, stores the message text in last_name, sends the
//                 string "<seen>" to jsfn/echo/<id> and egresses the playground
//                 record {"topic":"js","payload":"<id>:<seen>"}.
//   jsfn/echo     no state. Each message egresses
//                 {"topic":"js","payload":"echo:<id>:<caller>"}, where <caller>
//                 is "namespace/name/id" or "none" without a caller.
//   jsfn/kafka    state seen (int). Each message adds 1 to seen and writes,
//                 with kafkaEgressMessage, the Kafka record key <id>, value
//                 "<id>=<seen>" to topic "js-counts" of the Kafka egress
//                 jsfn/kafka-out; the message text "nokey" gives the record
//                 an empty key.
//
// Environment: PORT (default 8001; 0 picks a free port), HOST (default: all
// interfaces), JSFN_EXIT_ON_STDIN_EOF=1 to exit when stdin closes. Once
// listening it prints "listening on <port>".
"use strict";

const http = require("http");
const { StateFun, messageBuilder, egressMessageBuilder, kafkaEgressMessage } = require("apache-flink-statefun");

const EGRESS = "io.statefun.playground/egress";
const EgressRecordType = StateFun.jsonType("io.statefun.playground/EgressRecord");
const TOPIC = "js";

function record(payload) {
  return egressMessageBuilder({
    typename: EGRESS,
    value: { topic: TOPIC, payload: payload },
    valueType: EgressRecordType,
  });
}

// text reads a message as a string: a StateFun string as such, anything else
// (for example the raw body of a playground ingress request) as UTF-8 bytes.
function text(message) {
  if (message.isString()) {
    return message.asString();
  }
  return Buffer.from(message.rawValueBytes).toString("utf8");
}

const statefun = new StateFun();

statefun.bind({
  typename: "jsfn/counter",
  specs: [
    { name: "seen", type: StateFun.intType() },
    { name: "last_name", type: StateFun.stringType() },
  ],
  fn(context, message) {
    const seen = (context.storage.seen || 0) + 1;
    context.storage.seen = seen;
    context.storage.last_name = text(message);
    const id = context.self.id;
    context.send(
      messageBuilder({ typename: "jsfn/echo", id: id, value: String(seen), valueType: StateFun.stringType() })
    );
    context.send(record(`${id}:${seen}`));
  },
});

statefun.bind({
  typename: "jsfn/echo",
  fn(context, message) {
    const caller = context.caller;
    const from = caller === null ? "none" : `${caller.namespace}/${caller.name}/${caller.id}`;
    context.send(record(`echo:${context.self.id}:${from}`));
  },
});

statefun.bind({
  typename: "jsfn/kafka",
  specs: [{ name: "seen", type: StateFun.intType() }],
  fn(context, message) {
    const seen = (context.storage.seen || 0) + 1;
    context.storage.seen = seen;
    const id = context.self.id;
    context.send(
      kafkaEgressMessage({
        typename: "jsfn/kafka-out",
        topic: "js-counts",
        key: text(message) === "nokey" ? "" : id,
        value: `${id}=${seen}`,
      })
    );
  },
});

const port = process.env.PORT === undefined || process.env.PORT === "" ? 8001 : Number(process.env.PORT);
const host = process.env.HOST || undefined;
const server = http.createServer(statefun.handler());
server.listen(port, host, () => {
  console.log(`listening on ${server.address().port}`);
});

if (process.env.JSFN_EXIT_ON_STDIN_EOF === "1") {
  process.stdin.on("end", () => process.exit(0));
  process.stdin.on("error", () => process.exit(0));
  process.stdin.resume();
}
