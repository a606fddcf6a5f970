// A real OAuth 2.1 authorization server for mcp-host's OAuth tests: oidc-provider (a certified
// OpenID provider) on 127.0.0.1, with the client credentials grant, resource indicators
// (RFC 8707), JWT access tokens (RFC 9068) or opaque ones, introspection (RFC 7662) and
// revocation (RFC 7009). Nothing here issues a token by hand: every token is oidc-provider's.
//
// Usage: node provider.mjs [--port N] [--keys FILE] [--rotate] [--exit-with-stdin]
//   --port   0 (default) picks a free port; prints "listening on http://127.0.0.1:PORT" once up.
//   --keys   where its signing keys are kept (JWKS with private parts). Made on first use.
//   --rotate add new keys (kids "<alg>-<n+1>") in front of the kept ones and sign with them;
//            the old keys stay published (a key rotation as a provider does it).
//   --exit-with-stdin  exit when standard input closes (a test that dies takes it along).
// Every GET of the JWKS is logged on stderr as "jwks fetched" (the tests count refreshes).
//
// Clients (secret = id + "-secret", HTTP Basic), scopes "mcp tools:read baskets:write baskets:admin":
//   jwt-rs256, jwt-es256, jwt-eddsa   JWT access tokens signed with that algorithm, 600 s
//   short                              JWT (ES256), 1 s: expires during a test
//   opaque                             opaque access tokens, 600 s (introspect them)
//   mcp-host                           the resource server's own credential (introspection)
// A token's audience is the `resource` parameter of the token request (RFC 8707).
import { readFileSync, writeFileSync, existsSync } from 'node:fs';
import Provider from 'oidc-provider';
import { generateKeyPair, exportJWK } from 'jose';

const args = process.argv.slice(2);
const arg = (name, dflt) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : dflt;
};
const port = Number(arg('--port', '0'));
const keysFile = arg('--keys', null);
const rotate = args.includes('--rotate');

const ALGS = ['RS256', 'ES256', 'EdDSA'];

async function newKeys(generation) {
  const keys = [];
  for (const alg of ALGS) {
    const { privateKey } = await generateKeyPair(alg, { extractable: true, crv: alg === 'EdDSA' ? 'Ed25519' : undefined });
    const jwk = await exportJWK(privateKey);
    keys.push({ ...jwk, kid: `${alg}-${generation}`, alg, use: 'sig' });
  }
  return keys;
}

let keys;
if (keysFile && existsSync(keysFile)) {
  keys = JSON.parse(readFileSync(keysFile, 'utf8')).keys;
  if (rotate) {
    const generation = Math.max(...keys.map((k) => Number(k.kid.split('-')[1]))) + 1;
    keys = [...(await newKeys(generation)), ...keys];
  }
} else {
  keys = await newKeys(1);
}
if (keysFile) writeFileSync(keysFile, JSON.stringify({ keys }), { mode: 0o600 });

const SCOPES = 'mcp tools:read baskets:write baskets:admin';
const client = (id, extra = {}) => ({
  client_id: id,
  client_secret: `${id}-secret`,
  grant_types: ['client_credentials'],
  redirect_uris: [],
  response_types: [],
  token_endpoint_auth_method: 'client_secret_basic',
  scope: SCOPES,
  ...extra,
});
const algOf = { 'jwt-rs256': 'RS256', 'jwt-es256': 'ES256', 'jwt-eddsa': 'EdDSA', short: 'ES256' };

const host = '127.0.0.1';
const server = (await import('node:http')).createServer();
await new Promise((resolve) => server.listen(port, host, resolve));
const issuer = `http://${host}:${server.address().port}`;

const provider = new Provider(issuer, {
  clients: ['jwt-rs256', 'jwt-es256', 'jwt-eddsa', 'short', 'opaque', 'mcp-host'].map((id) => client(id)),
  jwks: { keys },
  scopes: SCOPES.split(' '),
  features: {
    devInteractions: { enabled: false },
    clientCredentials: { enabled: true },
    introspection: { enabled: true },
    revocation: { enabled: true },
    resourceIndicators: {
      enabled: true,
      // A token request without `resource` gets no audience this server's tests accept.
      defaultResource: () => 'urn:no-resource',
      useGrantedResource: () => true,
      getResourceServerInfo: (ctx, resource, c) => ({
        scope: SCOPES,
        audience: resource,
        accessTokenTTL: c.clientId === 'short' ? 1 : 600,
        accessTokenFormat: c.clientId === 'opaque' ? 'opaque' : 'jwt',
        jwt: { sign: { alg: algOf[c.clientId] ?? 'ES256' } },
      }),
    },
  },
});
provider.proxy = false;

const callback = provider.callback();
server.on('request', (req, res) => {
  if (req.method === 'GET' && req.url.startsWith('/jwks')) process.stderr.write('jwks fetched\n');
  callback(req, res);
});
for (const sig of ['SIGTERM', 'SIGINT']) process.on(sig, () => { server.close(); process.exit(0); });
if (args.includes('--exit-with-stdin')) {
  process.stdin.on('end', () => process.exit(0));
  process.stdin.resume();
}
console.log(`listening on ${issuer}`);
