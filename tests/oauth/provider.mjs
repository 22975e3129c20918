// A real OAuth 2.1 / OpenID authorization server on loopback for tests/test_oauth.py: npm `oidc-provider`.
//
//   node provider.mjs CONFIG.json   (run from the directory npm installed it in: tests/install_oauth.py)
//
// CONFIG: {"port", "jwks": {"keys": [private JWK]}, "rs_client_id", "rs_client_secret", "groups": {account: [..]},
//          "opaque_file": a JSON file listing the resources that get opaque tokens (read at each token),
//          "cimd": true to accept client ID metadata documents (client ids that are https URLs, fetched; the
//          documents are on loopback, so the SSRF guard of its fetch is left out: run with NODE_EXTRA_CA_CERTS
//          naming the test's certificate)}.
// Dynamic client registration (open), authorization code with PKCE, refresh tokens, resource indicators (RFC 8707):
// every resource on loopback ending in /mcp gets JWT access tokens (RS256; opaque ones for the resources listed in
// `opaque_file`, since oidc-provider introspects only those) whose `aud` is that resource and whose
// scopes are among memory:read memory:write; introspection (for the client `rs_client_id`) and revocation.
// Sign-in and consent are automated: GET /interaction/<uid> signs in the account named by the request's
// `x-test-user` header (default "alice") and grants the resource scopes asked for, or only those in `x-test-scopes`.
// Prints "listening <issuer>" on stdout once it accepts connections.
import http from 'node:http';
import fs from 'node:fs';
import Provider, { errors } from 'oidc-provider';

const cfg = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const issuer = `http://127.0.0.1:${cfg.port}`;
const RESOURCE_SCOPES = 'memory:read memory:write';
const resourceOk = (indicator) => /^http:\/\/127\.0\.0\.1:\d+\/mcp$/.test(indicator);

const provider = new Provider(issuer, {
  jwks: cfg.jwks,
  clients: [
    {
      client_id: cfg.rs_client_id,
      client_secret: cfg.rs_client_secret,
      grant_types: [],
      response_types: [],
      redirect_uris: [],
    },
  ],
  async findAccount(_ctx, id) {
    return { accountId: id, async claims() { return { sub: id }; } };
  },
  scopes: ['openid', 'offline_access', 'memory:read', 'memory:write'], // the client registers with its scopes
  pkce: { required: () => true },
  features: {
    devInteractions: { enabled: false },
    registration: { enabled: true },
    introspection: {
      enabled: true,
      async allowedPolicy(_ctx, client, token) {
        return client.clientId === cfg.rs_client_id || token.clientId === client.clientId;
      },
    },
    revocation: { enabled: true },
    clientIdMetadataDocument: { enabled: Boolean(cfg.cimd), ack: 'draft-02' },
    resourceIndicators: {
      enabled: true,
      async defaultResource(_ctx, _client, oneOf) { return oneOf; },
      async useGrantedResource() { return true; },
      async getResourceServerInfo(_ctx, indicator) {
        if (!resourceOk(indicator)) throw new errors.InvalidTarget();
        // oidc-provider introspects opaque tokens only: the resources listed in the file `opaque_file` get those
        const opaque = cfg.opaque_file && fs.existsSync(cfg.opaque_file)
          ? JSON.parse(fs.readFileSync(cfg.opaque_file, 'utf8')) : [];
        return {
          scope: RESOURCE_SCOPES,
          audience: indicator,
          accessTokenTTL: 600,
          accessTokenFormat: opaque.includes(indicator) ? 'opaque' : 'jwt',
          jwt: { sign: { alg: 'RS256' } },
        };
      },
    },
  },
  async extraTokenClaims(_ctx, token) {
    return { groups: (cfg.groups || {})[token.accountId] || [] };
  },
  async issueRefreshToken(_ctx, client) {
    return client.grantTypeAllowed('refresh_token');
  },
  interactions: { url: (_ctx, interaction) => `/interaction/${interaction.uid}` },
  // test only: the client metadata documents are served on loopback, which the SSRF guard refuses
  fetch: (url, options) => { delete options.dispatcher; return globalThis.fetch(url, options); },
});
provider.proxy = false;

async function interaction(req, res) {
  const details = await provider.interactionDetails(req, res);
  const user = req.headers['x-test-user'] || 'alice';
  if (details.prompt.name === 'login') {
    await provider.interactionFinished(req, res, { login: { accountId: String(user) } }, { mergeWithLastSubmission: false });
    return;
  }
  const only = req.headers['x-test-scopes'] ? String(req.headers['x-test-scopes']).split(' ') : null;
  const grant = details.grantId
    ? await provider.Grant.find(details.grantId)
    : new provider.Grant({ accountId: details.session.accountId, clientId: details.params.client_id });
  const missing = details.prompt.details || {};
  const allowed = (s) => !only || only.includes(s) || !s.startsWith('memory:');
  const split = (scopes) => [scopes.filter(allowed).join(' '), scopes.filter((s) => !allowed(s)).join(' ')];
  if (missing.missingOIDCScope) {
    const [yes, no] = split(missing.missingOIDCScope);
    if (yes) grant.addOIDCScope(yes);
    if (no) grant.rejectOIDCScope(no);
  }
  if (missing.missingOIDCClaims) grant.addOIDCClaims(missing.missingOIDCClaims);
  for (const [indicator, scopes] of Object.entries(missing.missingResourceScopes || {})) {
    const [yes, no] = split(scopes); // what the user consents to; the rest is declined
    if (yes) grant.addResourceScope(indicator, yes);
    if (no) grant.rejectResourceScope(indicator, no);
  }
  const grantId = await grant.save();
  await provider.interactionFinished(req, res, { consent: { grantId } }, { mergeWithLastSubmission: true });
}

const callback = provider.callback();
const server = http.createServer((req, res) => {
  if (req.url.startsWith('/interaction/')) {
    interaction(req, res).catch((err) => {
      res.statusCode = 500;
      res.end(String(err && err.stack || err));
    });
    return;
  }
  callback(req, res);
});
server.listen(cfg.port, '127.0.0.1', () => {
  process.stdout.write(`listening ${issuer}\n`);
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
