/**
 * Bundles the built-in page (web/) into dist/web: app.js (uPlot and the page code, minified),
 * app.css (uPlot's stylesheet and ours) and index.html. Everything the page loads comes from the
 * server that serves it: no CDN. Run by `npm run build` after tsc.
 */
import { copyFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { build } from 'esbuild';

const root = join(import.meta.dirname, '..');
const out = join(root, 'dist', 'web');
mkdirSync(out, { recursive: true });
await build({
  entryPoints: { app: join(root, 'web', 'main.ts') },
  bundle: true,
  minify: true,
  format: 'iife',
  target: 'es2020',
  outdir: out,
  sourcemap: true,
  legalComments: 'linked',
  logLevel: 'warning',
});
copyFileSync(join(root, 'web', 'index.html'), join(out, 'index.html'));
