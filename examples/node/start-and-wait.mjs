// Start a relayflow flow from Node and wait for its result event: the official Pub/Sub
// client and relayflow's published JSON Schemas, nothing else of relayflow's.
//
//   node start-and-wait.mjs FLOW 'INPUT_JSON' [FLOW_ID]
//
// It validates the start message against start-message.v1.json before publishing (a message
// the start function would reject is refused here, and nothing is published), subscribes to
// flow-results with a subscription of its own (filtered to this flow id, deleted at the end),
// publishes on flow-requests, and prints the flow's result event, checked against
// result-event.v1.json, as one line of JSON. Exit status: 0 if the flow SUCCEEDED, 2 if it
// ended otherwise, 1 on bad arguments or a timeout.
//
// Environment: GOOGLE_CLOUD_PROJECT (the project); PUBSUB_EMULATOR_HOST for the local stack
// (its env file, `source .relayflow/local/env`, sets both), Application Default Credentials in the
// cloud; RELAYFLOW_SCHEMAS, the directory of the schema files (default: this repository's
// relayflow/schemas; the api serves them too, at GET /schemas/{name});
// RELAYFLOW_TIMEOUT_S (default 120).
import { readFileSync } from "node:fs";
import { randomUUID } from "node:crypto";
import { PubSub } from "@google-cloud/pubsub";
import Ajv2020 from "ajv/dist/2020.js";

const schemas = process.env.RELAYFLOW_SCHEMAS ?? new URL("../../relayflow/schemas/", import.meta.url).pathname;
const load = (name) => JSON.parse(readFileSync(`${schemas}/${name}.v1.json`, "utf8"));
const ajv = new Ajv2020({ allErrors: true, strict: false });
const checkStart = ajv.compile(load("start-message"));
const checkResult = ajv.compile(load("result-event"));

function fail(message) {
  console.error(message);
  process.exit(1);
}

function startMessage(argv) {
  const [flow, rawInput, flowId] = argv;
  if (!flow || rawInput === undefined) fail("usage: node start-and-wait.mjs FLOW 'INPUT_JSON' [FLOW_ID]");
  let input;
  try {
    input = JSON.parse(rawInput);
  } catch (error) {
    fail(`INPUT_JSON is not JSON: ${error.message}`);
  }
  const message = { flow, input, flow_id: flowId ?? `node-${randomUUID()}` };
  if (!checkStart(message)) {
    const why = checkStart.errors.map((e) => `${e.instancePath || "/"} ${e.message}`).join("; ");
    fail(`the start message would be rejected: ${why}; nothing was published`);
  }
  return message;
}

async function main() {
  const message = startMessage(process.argv.slice(2));
  const timeoutS = Number(process.env.RELAYFLOW_TIMEOUT_S ?? "120");
  const pubsub = new PubSub({ projectId: process.env.GOOGLE_CLOUD_PROJECT });
  // Subscribe before publishing, so the event cannot be missed; the filter keeps other flows'
  // events out, and the expiry removes the subscription if this process dies first.
  const [subscription] = await pubsub.topic("flow-results").createSubscription(
    `node-example-${randomUUID()}`,
    { filter: `attributes.flow_id = "${message.flow_id}"`, expirationPolicy: { ttl: { seconds: 86400 } } },
  );
  try {
    const ended = waitForResult(subscription, message.flow_id, timeoutS);
    await pubsub.topic("flow-requests").publishMessage({ json: message });
    const event = await ended;
    console.log(JSON.stringify(event));
    return event.status === "SUCCEEDED" ? 0 : 2;
  } finally {
    await subscription.close();
    await subscription.delete();
  }
}

function waitForResult(subscription, flowId, timeoutS) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`no result event for ${flowId} within ${timeoutS} s`)),
      timeoutS * 1000,
    );
    subscription.on("error", reject);
    subscription.on("message", (received) => {
      received.ack();
      const { flow_id: id, event } = received.attributes;
      if (id !== flowId || event !== "result") return; // a clean-up event, or another flow's
      const body = JSON.parse(received.data.toString("utf8"));
      if (!checkResult(body)) {
        reject(new Error(`a result event that does not match its schema: ${ajv.errorsText(checkResult.errors)}`));
        return;
      }
      clearTimeout(timer);
      resolve(body);
    });
  });
}

main().then(
  (code) => process.exit(code),
  (error) => fail(error.message),
);
