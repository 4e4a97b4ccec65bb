/**
 * Bearer tokens with scopes. Every route declares the scope it needs in its `config.scope`
 * (`read`, `ingest`, `admin`, or `public`); one onRequest hook checks it: 401 without a known
 * token, 403 with a token that lacks the scope. Tokens are compared as sha256 digests with
 * timingSafeEqual, so neither the length nor the content of a stored token leaks through timing.
 * Only a token's name is ever logged or written to the audit.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { Type } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { RankwatchError } from '../core/errors.js';

export const SCOPES = ['read', 'ingest', 'admin'] as const;
export type Scope = (typeof SCOPES)[number];
/** What a route declares: a scope, or `public` (no token needed: health, the OpenAPI document). */
export type RouteScope = Scope | 'public';

declare module 'fastify' {
  interface FastifyContextConfig {
    scope?: RouteScope;
  }
  interface FastifyRequest {
    /** The name of the token that authenticated the request; `anonymous` when auth is off. */
    principal?: string;
  }
}

const TokenEntry = Type.Object(
  {
    name: Type.String({ minLength: 1, description: 'shown in logs and the audit instead of the token' }),
    token: Type.Optional(Type.String({ minLength: 16, description: 'the token itself' })),
    sha256: Type.Optional(
      Type.String({
        pattern: '^[0-9a-fA-F]{64}$',
        description: 'hex sha256 of the token (keeps it off disk)',
      }),
    ),
    scopes: Type.Array(Type.Union(SCOPES.map((s) => Type.Literal(s))), { minItems: 1 }),
  },
  { additionalProperties: false },
);
export const AuthFile = Type.Object({ tokens: Type.Array(TokenEntry) }, { additionalProperties: false });

export interface AuthToken {
  name: string;
  digest: Buffer;
  scopes: ReadonlySet<Scope>;
  /** The file holds the token itself (not its sha256): whoever reads the file can use it. */
  plaintext?: boolean;
}

const sha256 = (s: string) => createHash('sha256').update(s).digest();

/** Parses an auth file's JSON; every problem names its key. */
export function parseAuth(json: unknown, source = 'auth file'): AuthToken[] {
  if (!Value.Check(AuthFile, json)) {
    const problems = [...Value.Errors(AuthFile, json)]
      .slice(0, 5)
      .map((e) => `${e.path || '/'}: ${e.message}`);
    throw new RankwatchError('RANKWATCH_ERR_CONFIG', `${source}: ${problems.join('; ')}`);
  }
  const names = new Set<string>();
  return json.tokens.map((t, i) => {
    if ((t.token === undefined) === (t.sha256 === undefined))
      throw new RankwatchError(
        'RANKWATCH_ERR_CONFIG',
        `${source}: /tokens/${i}: give exactly one of "token" or "sha256"`,
      );
    if (names.has(t.name))
      throw new RankwatchError(
        'RANKWATCH_ERR_CONFIG',
        `${source}: /tokens/${i}/name: "${t.name}" is used twice`,
      );
    names.add(t.name);
    const digest = t.sha256 !== undefined ? Buffer.from(t.sha256, 'hex') : sha256(t.token as string);
    return { name: t.name, digest, scopes: new Set(t.scopes), plaintext: t.token !== undefined };
  });
}

export function loadAuthFile(path: string): AuthToken[] {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new RankwatchError('RANKWATCH_ERR_CONFIG', `auth: cannot read ${path}: ${(err as Error).message}`);
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (err) {
    throw new RankwatchError('RANKWATCH_ERR_CONFIG', `auth: ${path} is not JSON: ${(err as Error).message}`);
  }
  return parseAuth(json, path);
}

/** The tokens a server runs with: the --auth file's, plus `--token T` as a read-and-ingest token named `cli-token`. */
export function authTokens(o: { file?: string; token?: string }): AuthToken[] {
  const tokens = o.file ? loadAuthFile(o.file) : [];
  if (o.token)
    tokens.push({ name: 'cli-token', digest: sha256(o.token), scopes: new Set(['read', 'ingest']) });
  return tokens;
}

/** The token a request carries, if any known one matches. Every entry is compared, match or not. */
function identify(tokens: AuthToken[], header: string | undefined): AuthToken | undefined {
  const m = /^Bearer\s+(\S+)\s*$/i.exec(header ?? '');
  if (!m) return undefined;
  const digest = sha256(m[1]);
  let found: AuthToken | undefined;
  for (const t of tokens) if (timingSafeEqual(digest, t.digest) && !found) found = t;
  return found;
}

/** Every later log line of this request (its request line too, api/request-log.ts) names the token. */
function nameInLogs(req: FastifyRequest, reply: FastifyReply, name: string): void {
  req.principal = name;
  const log = req.log.child({ token: name });
  req.log = log;
  reply.log = log;
}

/**
 * Installs the check on the root app, before any route plugin, so it covers all of them.
 * `current` gives the tokens in force at each request (the --auth file may be re-read while the
 * server runs). With no tokens at all every route is open (loopback use, as before --auth
 * existed); a /v1 route that declares no scope is refused at startup, so none can be added open
 * by mistake.
 */
export function installAuth(app: FastifyInstance, current: () => AuthToken[]): void {
  app.decorateRequest('principal', undefined);
  app.addHook('onRoute', (route) => {
    if (route.url.startsWith('/v1/') && route.config?.scope === undefined)
      throw new Error(`route ${route.method} ${route.url} declares no scope (config.scope)`);
  });
  app.addHook('onRequest', async (req: FastifyRequest, reply: FastifyReply) => {
    const scope = req.routeOptions.config?.scope ?? 'public';
    if (scope === 'public') return;
    const tokens = current();
    if (tokens.length === 0) return nameInLogs(req, reply, 'anonymous');
    const t = identify(tokens, req.headers.authorization);
    if (!t) {
      reply.header('www-authenticate', 'Bearer realm="rankwatch"');
      return reply.code(401).send({
        statusCode: 401,
        error: 'Unauthorized',
        message: `${req.method} ${req.routeOptions.url} needs "Authorization: Bearer <token>" with the ${scope} scope (a token from the --auth file, or --token)`,
      });
    }
    nameInLogs(req, reply, t.name);
    if (!t.scopes.has(scope))
      return reply.code(403).send({
        statusCode: 403,
        error: 'Forbidden',
        message: `token "${t.name}" has scopes [${[...t.scopes].join(', ')}]; ${req.method} ${req.routeOptions.url} needs ${scope}`,
      });
  });
}
