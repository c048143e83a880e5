// The Durable Streams conformance suite (@durable-streams/server-conformance-tests, pinned in
// package.json) against the server at DS_BASE_URL, with its subscription tests when
// DS_SUBSCRIPTIONS=1, and the server's long-poll timeout in DS_LONG_POLL_MS when it is not the
// suite's default of 20 s. Run through vitest from this folder (testing/ds_conformance.py does):
// the suite's own CLI finds no tests, since vitest's default exclude drops its runner.
import { runConformanceTests } from "@durable-streams/server-conformance-tests";

const baseUrl = process.env.DS_BASE_URL;
if (!baseUrl) throw new Error("DS_BASE_URL must name the server under test, e.g. http://127.0.0.1:8080/ds");
const longPollTimeoutMs = process.env.DS_LONG_POLL_MS ? Number(process.env.DS_LONG_POLL_MS) : undefined;
runConformanceTests({ baseUrl, longPollTimeoutMs, subscriptions: process.env.DS_SUBSCRIPTIONS === "1" });
