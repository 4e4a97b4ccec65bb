/**
 * The built-in page: GET / and its bundle under /web/ (built by scripts/build-web.ts into
 * dist/web at `npm run build`). The files hold no data, so they are public; the page asks for a
 * read token and calls the /v1 routes with it, where the usual scopes apply.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { FastifyPluginAsync } from 'fastify';

const TYPES: Record<string, string> = {
  'app.js': 'text/javascript; charset=utf-8',
  'app.css': 'text/css; charset=utf-8',
  'app.js.map': 'application/json',
  'app.css.map': 'application/json',
  'app.js.LEGAL.txt': 'text/plain; charset=utf-8',
};

/** dist/web next to the compiled plugin (dist/api/routes), or from the source tree (tsx, tests). */
export function webDir(): string | undefined {
  const here = import.meta.dirname;
  return [join(here, '..', '..', 'web'), join(here, '..', '..', 'dist', 'web')].find((d) =>
    // app.js, not index.html: web/ (the source) has an index.html too.
    existsSync(join(d, 'app.js')),
  );
}

const NOT_BUILT =
  '<!doctype html><meta charset="utf-8"><title>rankwatch</title><p>The page is not built: run <code>npm run build</code>, then restart. The API is at <a href="/docs">/docs</a>.</p>';

export const webRoutes: FastifyPluginAsync<{ dir?: string }> = async (app, opts) => {
  const dir = opts.dir ?? webDir();
  // Read once: the bundle is small and fixed for the life of the process.
  const files = new Map<string, Buffer>();
  for (const name of ['index.html', ...Object.keys(TYPES)]) {
    const path = dir && join(dir, name);
    if (path && existsSync(path)) files.set(name, readFileSync(path));
  }
  const config = { scope: 'public' as const };
  const schema = { hide: true };
  app.get('/', { config, schema }, async (_req, reply) =>
    reply
      .type('text/html; charset=utf-8')
      .header('cache-control', 'no-cache')
      .header(
        'content-security-policy',
        "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'",
      )
      .send(files.get('index.html') ?? NOT_BUILT),
  );
  app.get<{ Params: { file: string } }>('/web/:file', { config, schema }, async (req, reply) => {
    const body = files.get(req.params.file);
    if (!body || !TYPES[req.params.file])
      return reply
        .code(404)
        .send({ statusCode: 404, error: 'Not Found', message: `no file /web/${req.params.file}` });
    return reply.type(TYPES[req.params.file]).header('cache-control', 'no-cache').send(body);
  });
};
