// Several `prism mock` servers in one node process, one per DOCUMENT=PORT argument; the first
// argument is the @stoplight/prism-cli package directory. Prints "ready" once all listen.
"use strict";
const path = require("path");
const [cli, ...pairs] = process.argv.slice(2);
const { createSingleProcessPrism } = require(path.join(cli, "dist/util/createServer"));

(async () => {
  for (const pair of pairs) {
    const at = pair.lastIndexOf("=");
    await createSingleProcessPrism({
      document: pair.slice(0, at),
      port: Number(pair.slice(at + 1)),
      host: "127.0.0.1",
      cors: true,
      errors: false,
      multiprocess: false,
      verboseLevel: "warn",
      dynamic: false,
      ignoreExamples: false,
      seed: null,
    });
  }
  console.log("ready");
})().catch((error) => {
  console.error(error);
  process.exit(1);
});
