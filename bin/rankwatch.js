#!/usr/bin/env node
// Runs the compiled CLI; `npm install` builds it (the `prepare` script).
import { existsSync } from 'node:fs';

const main = new URL('../dist/cli/main.js', import.meta.url);
if (!existsSync(main)) {
  console.error(
    'rankwatch is not built yet: run `npm install` (or `npm run build`) in the repository first.',
  );
  process.exit(1);
}
await import(main.href);
