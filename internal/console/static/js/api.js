// The state API client of the console. The bearer token lives in this
// tab's sessionStorage only: it is sent in the Authorization header of
// each request, never in a cookie or a URL, and is gone when the tab is.

const TOKEN_KEY = 'statefun.token';

export function token() { return sessionStorage.getItem(TOKEN_KEY) || ''; }
export function setToken(t) { sessionStorage.setItem(TOKEN_KEY, t); }
export function clearToken() { sessionStorage.removeItem(TOKEN_KEY); }

// ApiError is a non-2xx answer: status, the problem+json body (when there
// is one) and the response headers.
export class ApiError extends Error {
  constructor(status, problem, headers) {
    super(problem && problem.detail ? problem.detail : 'HTTP ' + status);
    this.status = status;
    this.problem = problem || {};
    this.headers = headers;
  }
}

// request calls the API. opts: method, body (string; objects are sent as
// JSON), headers, raw (return the Response's text, not parsed JSON).
// It resolves to {status, headers, data, text} and rejects with ApiError.
export async function request(path, opts = {}) {
  const headers = new Headers(opts.headers || {});
  const t = token();
  if (t) headers.set('Authorization', 'Bearer ' + t);
  let body = opts.body;
  if (body != null && typeof body === 'object') {
    body = JSON.stringify(body);
    headers.set('Content-Type', 'application/json');
  }
  const resp = await fetch(path, {method: opts.method || 'GET', headers, body, credentials: 'omit', cache: 'no-store', redirect: 'error'});
  const text = await resp.text();
  const ct = resp.headers.get('Content-Type') || '';
  let data = null;
  if (ct.startsWith('application/json') || ct.startsWith('application/problem+json')) {
    try { data = parseJSON(text); } catch { data = null; }
  }
  if (!resp.ok) throw new ApiError(resp.status, data, resp.headers);
  return {status: resp.status, headers: resp.headers, data, text};
}

// parseJSON parses JSON keeping the exact text of numbers too large for a
// double (a long state value) where the browser offers the source text.
export function parseJSON(text) {
  return JSON.parse(text, function (key, value, ctx) {
    if (typeof value === 'number' && ctx && typeof ctx.source === 'string' && !Number.isSafeInteger(value) && /^-?\d+$/.test(ctx.source)) {
      return new BigNumber(ctx.source);
    }
    return value;
  });
}

// BigNumber holds an integer as its exact decimal text.
export class BigNumber {
  constructor(text) { this.text = text; }
  toString() { return this.text; }
  toJSON() { return this.text; }
}

// reasonHeaders returns the Statefun-Reason header for a reason, or throws
// when it cannot travel in a header (browsers send header values as
// Latin-1).
export function reasonHeaders(reason) {
  if (!reason) return {};
  if (/[^\x20-\x7e\xa0-\xff]/.test(reason)) {
    throw new Error('A reason sent with a state write travels in a header: use Latin-1 characters, without line breaks.');
  }
  return {'Statefun-Reason': reason};
}
