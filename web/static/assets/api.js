// The console's client of the wsgate server API (contract §5).

/** An API call that failed: HTTP status (0 when the gateway is unreachable) and the contract's error code. */
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.name = 'ApiError';
    this.status = status;
    this.code = code;
  }
}

/**
 * Calls the server API of the gateway that served the page. Paths are
 * relative to the page, so the console also works behind a path prefix.
 */
export class Api {
  /** @param {{key?: string, timeout?: number}} [o] */
  constructor(o = {}) {
    this.key = o.key ?? '';
    this.timeout = o.timeout ?? 5000;
  }

  /**
   * @param {string} method
   * @param {string} path relative, e.g. `api/v1/nodes`
   * @param {*} [body] JSON body
   */
  async request(method, path, body) {
    const headers = { Accept: 'application/json' };
    if (this.key) headers.Authorization = 'Bearer ' + this.key;
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    let res;
    try {
      res = await fetch(path, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        cache: 'no-store',
        signal: AbortSignal.timeout(this.timeout),
      });
    } catch (err) {
      const timeout = err?.name === 'TimeoutError' || err?.name === 'AbortError';
      throw new ApiError(0, timeout ? 'timeout' : 'unreachable', timeout
        ? `no answer from ${location.host} within ${this.timeout / 1000} s`
        : `cannot reach ${location.host} (${err?.message ?? err})`);
    }
    if (res.status === 204) return null;
    const text = await res.text().catch(() => '');
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch { /* not JSON */ }
    if (!res.ok) {
      const e = data?.error;
      throw new ApiError(res.status, e?.code ?? `http_${res.status}`, e?.message || text.trim() || res.statusText || `HTTP ${res.status}`);
    }
    return data;
  }

  nodes() { return this.request('GET', 'api/v1/nodes'); }
  publish(body) { return this.request('POST', 'api/v1/publish', body); }
  presence(user) { return this.request('GET', `api/v1/users/${encodeURIComponent(user)}/presence`); }
  members(room) { return this.request('GET', `api/v1/rooms/${encodeURIComponent(room)}/members`); }
  rooms(prefix) { return this.request('GET', `api/v1/rooms?limit=100&prefix=${encodeURIComponent(prefix)}`); }
  roomPresence(room) { return this.request('GET', `api/v1/rooms/${encodeURIComponent(room)}/presence?limit=200`); }
  connections(node, cursor = '', limit = 25) {
    return this.request('GET', `api/v1/nodes/${encodeURIComponent(node)}/connections?limit=${limit}&cursor=${encodeURIComponent(cursor)}`);
  }
  disconnectConn(id) { return this.request('POST', `api/v1/connections/${encodeURIComponent(id)}/disconnect`, { reason: 'disconnected from the console' }); }
  stats(since = 0) { return this.request('GET', `api/v1/stats?since=${since}`); }
  drain(node) { return this.request('POST', `api/v1/nodes/${encodeURIComponent(node)}/drain`); }
}
