// Lists the REST operations an installed Azure SDK for JavaScript
// management package calls: method, path template and api-version, read
// from its published dist/commonjs/api/*/operations.js (the code the
// package runs). emulator/arm/testdata/clients/ keeps the output, so that a
// Go test sends exactly those api-versions without npm.
//
//   npm install @azure/arm-compute@latest   (in an empty folder)
//   node hack/clientversions/js.mjs node_modules/@azure/arm-compute > out.txt
import fs from "node:fs";
import path from "node:path";

const pkgDir = process.argv[2];
const pkg = JSON.parse(fs.readFileSync(path.join(pkgDir, "package.json"), "utf8"));
const apiDir = path.join(pkgDir, "dist", "commonjs", "api");
const out = new Set();
for (const group of fs.readdirSync(apiDir)) {
  const file = path.join(apiDir, group, "operations.js");
  if (!fs.existsSync(file)) continue;
  const src = fs.readFileSync(file, "utf8");
  // Each _xxxSend builds its URL with expandUrlTemplate("<path>{?api%2Dversion...}",
  // { ..., "api%2Dversion": "<version>" }) and sends it with
  // context.path(path).<method>(...).
  const re = /expandUrlTemplate\)?\(\s*"([^"]+)",\s*\{([\s\S]*?)\}[\s\S]*?context\.path\(path\)\.(get|put|post|patch|delete|head)\(/g;
  for (const m of src.matchAll(re)) {
    const tmpl = m[1].replace(/\{\?[^}]*\}$/, "");
    // A client whose api-version the caller may set defaults to it: "api%2Dversion": context.apiVersion ?? "<version>".
    const v = /"api%2Dversion":\s*(?:context\.apiVersion\s*\?\?\s*)?"([^"]+)"/.exec(m[2]);
    if (!v) continue;
    out.add(`${m[3].toUpperCase()} ${tmpl} ${v[1]}`);
  }
}
console.log(`# ${pkg.name} ${pkg.version}: dist/commonjs/api/*/operations.js of the npm package`);
for (const line of [...out].sort()) console.log(line);
