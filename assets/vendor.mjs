// Copies the pinned front-end files into static/vendor/ (axe-core into tests/browser/vendor/)
// and rebuilds the tiktoken encodings (the BPE rank files) from js-tiktoken's compact form into
// tiktoken's own file format, so that token counts are exact with no network. ctxhub verifies
// each encoding's official sha256 when it loads it, so a bad rebuild cannot go unnoticed.
import { copyFileSync, mkdirSync, writeFileSync } from "node:fs";
import { createHash } from "node:crypto";

const here = new URL(".", import.meta.url).pathname;
const staticDir = `${here}../static/vendor/`;
const encodingsDir = `${here}../ctxhub/governance/encodings/`;
mkdirSync(staticDir, { recursive: true });
mkdirSync(encodingsDir, { recursive: true });

copyFileSync(`${here}node_modules/htmx.org/dist/htmx.min.js`, `${staticDir}htmx.min.js`);
copyFileSync(`${here}node_modules/htmx-ext-ws/dist/ws.min.js`, `${staticDir}htmx-ext-ws.min.js`);
copyFileSync(`${here}node_modules/uplot/dist/uPlot.iife.min.js`, `${staticDir}uPlot.iife.min.js`);
copyFileSync(`${here}node_modules/uplot/dist/uPlot.min.css`, `${staticDir}uPlot.min.css`);
// axe-core checks the pages' accessibility in the browser tests; it is never served.
const testsVendor = `${here}../tests/browser/vendor/`;
mkdirSync(testsVendor, { recursive: true });
copyFileSync(`${here}node_modules/axe-core/axe.min.js`, `${testsVendor}axe.min.js`);
copyFileSync(`${here}node_modules/axe-core/LICENSE`, `${testsVendor}axe-core.LICENSE`);

for (const name of ["cl100k_base", "o200k_base"]) {
  const ranks = (await import(`js-tiktoken/ranks/${name}`)).default;
  const lines = [];
  for (const row of ranks.bpe_ranks.split("\n").filter(Boolean)) {
    const [, offset, ...tokens] = row.split(" ");
    tokens.forEach((token, i) => lines.push(`${token} ${Number(offset) + i}`));
  }
  const text = lines.join("\n") + "\n";
  writeFileSync(`${encodingsDir}${name}.tiktoken`, text);
  console.log(name, createHash("sha256").update(text).digest("hex"));
}
