/** Writes the table of environment variables into docs/operations.md from the option declarations. */
import { readFileSync, writeFileSync } from 'node:fs';
import { withVariablesTable } from '../cli/options-doc.js';

const file = new URL('../docs/operations.md', import.meta.url);
writeFileSync(file, await withVariablesTable(readFileSync(file, 'utf8')));
console.error(`updated ${file.pathname}`);
