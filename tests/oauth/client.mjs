// A real MCP client signing in with OAuth for tests/test_oauth.py: the MCP TypeScript SDK's OAuth client
// (`@modelcontextprotocol/sdk`, OAuthClientProvider + StreamableHTTPClientTransport).
//
//   node client.mjs SERVER_URL USER [SCOPES]   (run from the directory npm installed the SDK in)
//   CLIENT_METADATA_URL=https://... : the client's id is that client ID metadata document's URL (no registration)
//
// The whole flow: the server's 401 and its resource metadata, the authorization server's metadata, dynamic client
// registration, authorization code with PKCE and the resource indicator, the token; then tools/list and tool calls;
// then a refresh (the access token is spoiled, the server's 401 makes the SDK use the refresh token). The sign-in
// page is driven with plain HTTP requests (cookies kept, redirects followed by hand) as USER (header x-test-user;
// SCOPES, when given, limits the scopes consented to). Prints one JSON object on stdout with what happened.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js';

const [serverUrl, user, onlyScopes] = process.argv.slice(2);
const REDIRECT = 'http://127.0.0.1:9/callback'; // never listened on: the code is taken from the redirect itself
const seen = { requests: [] };

class MemoryProvider {
  constructor() {
    this.saved = {};
    this.authorizationUrl = null;
    if (process.env.CLIENT_METADATA_URL) this.clientMetadataUrl = process.env.CLIENT_METADATA_URL;
  }
  get redirectUrl() { return REDIRECT; }
  get clientMetadata() {
    return {
      client_name: 'tiermem oauth test',
      redirect_uris: [REDIRECT],
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      token_endpoint_auth_method: 'none',
      application_type: 'native',
    };
  }
  clientInformation() { return this.saved.client; }
  saveClientInformation(info) { this.saved.client = info; seen.registered = info.client_id; }
  tokens() { return this.saved.tokens; }
  saveTokens(tokens) {
    seen.tokenSaves = (seen.tokenSaves || 0) + 1;
    this.saved.tokens = tokens;
  }
  redirectToAuthorization(url) { this.authorizationUrl = url; }
  saveCodeVerifier(v) { this.saved.verifier = v; }
  codeVerifier() { return this.saved.verifier; }
}

// The sign-in, as a browser would do it: follow redirects by hand, keep the cookies, stop at our redirect URI.
async function signIn(url) {
  const jar = new Map();
  let next = new URL(url);
  for (let hop = 0; hop < 20; hop++) {
    const cookie = [...jar].map(([k, v]) => `${k}=${v}`).join('; ');
    const res = await fetch(next, {
      redirect: 'manual',
      headers: { cookie, 'x-test-user': user, ...(onlyScopes ? { 'x-test-scopes': onlyScopes } : {}) },
    });
    for (const line of res.headers.getSetCookie()) {
      const [pair] = line.split(';');
      const i = pair.indexOf('=');
      jar.set(pair.slice(0, i).trim(), pair.slice(i + 1).trim());
    }
    const location = res.headers.get('location');
    if (!location) throw new Error(`sign-in stopped at ${next} with ${res.status}: ${(await res.text()).slice(0, 300)}`);
    next = new URL(location, next);
    if (next.href.startsWith(REDIRECT)) {
      const error = next.searchParams.get('error');
      if (error) throw new Error(`authorization error: ${error}: ${next.searchParams.get('error_description')}`);
      seen.iss = next.searchParams.get('iss');
      return next.searchParams.get('code');
    }
  }
  throw new Error('too many redirects during sign-in');
}

const loggingFetch = async (input, init) => {
  const res = await fetch(input, init);
  const url = new URL(typeof input === 'string' || input instanceof URL ? input : input.url);
  seen.requests.push(`${init?.method || 'GET'} ${url.pathname} ${res.status}`);
  return res;
};

const provider = new MemoryProvider();
async function connect() {
  const transport = new StreamableHTTPClientTransport(new URL(serverUrl), { authProvider: provider, fetch: loggingFetch });
  const client = new Client({ name: 'oauth-test', version: '1.0.0' });
  await client.connect(transport);
  return { client, transport };
}

try {
  let first;
  try {
    first = await connect();
    throw new Error('connected without signing in');
  } catch (err) {
    if (!(err instanceof UnauthorizedError)) throw err;
    seen.authorizationUrl = provider.authorizationUrl?.href;
    const code = await signIn(provider.authorizationUrl);
    const transport = new StreamableHTTPClientTransport(new URL(serverUrl), { authProvider: provider, fetch: loggingFetch });
    await transport.finishAuth(code);
  }
  seen.firstToken = provider.saved.tokens.access_token;
  seen.scope = provider.saved.tokens.scope;
  seen.hasRefresh = Boolean(provider.saved.tokens.refresh_token);
  const { client } = await connect();
  const tools = await client.listTools();
  seen.tools = tools.tools.map((t) => t.name);
  const call = async (name, args) => {
    try {
      const r = await client.callTool({ name, arguments: args });
      return { ok: !r.isError, text: (r.content || []).map((c) => c.text || '').join('') };
    } catch (e) {
      return { ok: false, error: String(e && e.message || e) };
    }
  };
  seen.insert = await call('archival_memory_insert', { content: `${user} keeps the spare key under the blue pot` });
  seen.search = await call('archival_memory_search', { query: 'spare key' });
  await client.close();
  // refresh: a spoiled access token gets a 401; the SDK refreshes with the refresh token and retries
  provider.saved.tokens = { ...provider.saved.tokens, access_token: 'spoiled' };
  const again = await connect();
  seen.afterRefresh = await again.client.listTools().then((t) => t.tools.length);
  seen.refreshedToken = provider.saved.tokens.access_token;
  await again.client.close();
  seen.clientId = provider.saved.client.client_id;
  process.stdout.write(JSON.stringify(seen) + '\n');
} catch (err) {
  seen.failure = String(err && err.stack || err);
  process.stdout.write(JSON.stringify(seen) + '\n');
  process.exit(1);
}
