// The Durable Streams reference server (@durable-streams/server, pinned in package.json), in
// memory, for bench/test_hot_path.py: `node ds-reference.mjs PORT` serves on 127.0.0.1:PORT
// and prints its URL once it listens; SIGTERM stops it.
import { DurableStreamTestServer } from "@durable-streams/server";

const port = Number(process.argv[2] ?? 0);
const server = new DurableStreamTestServer({ port, host: "127.0.0.1", compression: false });
console.log(await server.start());
process.on("SIGTERM", async () => {
  await server.stop();
  process.exit(0);
});
