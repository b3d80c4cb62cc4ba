// The console's entry point: the token gate, the router (hash routes, so
// a page can be reloaded or linked to and the token never appears in a
// URL), and the session header.

import {h, replace} from './dom.js';
import {request, token, setToken, clearToken, ApiError} from './api.js';
import {session, clearNotices, errorBox} from './ui.js';
import {overview} from './overview.js';
import {types, ids} from './browse.js';
import {address} from './address.js';
import {entry} from './entry.js';
import {audit} from './audit.js';
import {deadLetters, ingressDeadLetters} from './deadletters.js';
import {cluster} from './cluster.js';
import {jobs} from './jobs.js';

const main = document.getElementById('main');
let generation = 0; // bumps on every navigation; a page's timers check it
let leaveHooks = [];

// whoami asks the API what this tab's token may do.
async function whoami() {
  const r = await request('/whoami');
  Object.assign(session, r.data, {canWrite: r.data.scopes.includes('write')});
  document.body.dataset.canWrite = session.canWrite ? 'yes' : 'no';
  replace(document.getElementById('who'),
    h('span', null, 'Signed in as ', h('strong', {id: 'principal'}, session.principal)),
    session.canWrite ? null : h('span', {class: 'badge paused', id: 'read-only', title: session.readOnly ? 'statefun run --read-only: this runtime changes nothing' : null}, session.readOnly ? 'read-only mode' : 'read-only'),
    session.tokens ? h('button', {type: 'button', class: 'small', onclick: signOut}, 'Forget token') : null);
  document.getElementById('nav').hidden = false;
  // The cluster's page exists in cluster mode only (GET /cluster is a 404
  // in embedded mode).
  request('/cluster', {method: 'HEAD'}).then(() => { document.getElementById('nav-cluster').hidden = false; }, () => {});
  // The Jobs link shows when the API serves jobs (both engines do).
  request('/jobs', {method: 'HEAD'}).then(() => { document.getElementById('nav-jobs').hidden = false; }, () => {});
}

function signOut() {
  clearToken();
  location.hash = '#/';
  gate();
}

// gate asks for a token once per tab: it is kept in sessionStorage only.
function gate(problem) {
  document.getElementById('nav').hidden = true;
  replace(document.getElementById('who'));
  const input = h('input', {id: 'token', name: 'token', type: 'password', autocomplete: 'off', required: true, 'aria-describedby': 'token-hint'});
  replace(main, h('section', {class: 'panel gate', 'aria-labelledby': 'gate-h'},
    h('h1', {id: 'gate-h'}, 'Sign in'),
    h('p', {class: 'muted'}, 'This runtime\'s state API needs a bearer token (one line of its --api-tokens file).'),
    problem ? errorBox(problem) : null,
    // method post: were the script not to take the submit, the token
    // would go in a request body, never in a URL.
    h('form', {method: 'post', onsubmit: async (e) => {
      e.preventDefault();
      setToken(input.value.trim());
      try { await whoami(); render(); } catch (err) { clearToken(); gate(err); }
    }},
    h('div', {class: 'field'}, h('label', {for: 'token'}, 'API token'), input,
      h('div', {class: 'hint', id: 'token-hint'}, 'Kept for this browser tab only (session storage), sent in the Authorization header; never in a cookie or a URL.')),
    h('div', {class: 'toolbar'}, h('button', {type: 'submit', class: 'primary'}, 'Sign in')))));
  input.focus();
}

// endpointBanners shows a banner for each function endpoint whose server
// is down (GET /endpoints), on every page: a server that is down is one
// fact, not a failing row per address. It never holds the page up.
async function endpointBanners() {
  let eps;
  try { eps = (await request('/endpoints')).data.endpoints; } catch { return; }
  const down = eps.filter((e) => !e.up);
  replace(document.getElementById('banners'), ...down.map((e) =>
    h('div', {class: 'notice error', 'data-endpoint': e.functions},
      h('div', {class: 'body'},
        h('div', {class: 'title'}, `Function endpoint ${e.functions} is down`),
        h('div', null, `${e.url} — ${e.failuresInARow} calls in a row could not connect${e.since ? ' since ' + new Date(e.since).toLocaleString() : ''}. Messages to its functions wait in their inboxes and are retried.`),
        e.lastError ? h('div', {class: 'muted'}, h('code', null, e.lastError)) : null))));
}

// render shows the page the hash names.
async function render() {
  endpointBanners();
  for (const f of leaveHooks) f();
  leaveHooks = [];
  const gen = ++generation;
  const [pathPart, queryPart] = location.hash.replace(/^#\/?/, '').split('?');
  const segs = pathPart ? pathPart.split('/').map(decodeURIComponent) : [];
  const ctx = {
    query: new URLSearchParams(queryPart || ''),
    current: () => gen === generation,
    onLeave: (f) => leaveHooks.push(f),
    reload: () => { if (gen === generation) render(); },
  };
  const section = segs[0] || 'overview';
  for (const a of document.querySelectorAll('#nav a')) {
    if (a.dataset.nav === section) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
  }
  const titles = {overview: 'Overview', browse: 'Browse', audit: 'Audit log', 'dead-letters': 'Dead letters', cluster: 'Cluster', jobs: 'Jobs'};
  document.title = [segs.slice(1).join('/'), titles[section], 'statefun console'].filter(Boolean).join(' · ');
  try {
    switch (section) {
      case 'overview': await overview(main, ctx); break;
      case 'browse':
        if (segs.length >= 5) await entry(main, ctx, segs[1], segs[2], segs[3], segs[4]);
        else if (segs.length === 4) await address(main, ctx, segs[1], segs[2], segs[3]);
        else if (segs.length === 3) await ids(main, ctx, segs[1], segs[2]);
        else await types(main, ctx);
        break;
      case 'audit': await audit(main, ctx); break;
      case 'cluster': await cluster(main, ctx); break;
      case 'jobs': await jobs(main, ctx); break;
      case 'dead-letters':
        if (segs.length === 3) await ingressDeadLetters(main, ctx, segs[1], segs[2]);
        else await deadLetters(main, ctx);
        break;
      default: replace(main, h('h1', null, 'Not found'), h('p', null, h('a', {href: '#/'}, 'Overview')));
    }
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) { clearToken(); gate(err); return; }
    main.append(errorBox(err));
  }
  if (gen === generation) {
    document.body.dataset.page = section;
    viewRendered(section);
  }
}

// viewRendered marks, with the Performance API, when a page's first data
// view is in the document (every page resolves once it is), and when the
// frame showing it has been painted (the first task after the next
// animation frame). Their startTime is in milliseconds from the
// navigation's start: how bench/console_test.go measures the first view,
// without a clock in the page of its own.
function viewRendered(section) {
  const detail = {page: section, route: location.hash};
  performance.mark('statefun:rendered', {detail});
  requestAnimationFrame(() => setTimeout(() => performance.mark('statefun:painted', {detail})));
}

let lastHash = null;
window.addEventListener('hashchange', () => {
  // A new page: drop the notices of the previous one unless this
  // navigation came from a write (which announces its receipt first).
  const pageOf = (hsh) => (hsh || '').split('?')[0];
  if (pageOf(location.hash) !== pageOf(lastHash) && !document.body.dataset.keepNotice) clearNotices();
  delete document.body.dataset.keepNotice;
  lastHash = location.hash;
  render().then(() => {
    // Move the focus to the new page's heading (screen readers announce
    // it) — unless the operator has already put it in the page, say in a
    // search field while the page's data was on the way: their typing
    // must not be cut off.
    const a = document.activeElement;
    if (a && a !== main && main.contains(a)) return;
    const h1 = main.querySelector('h1');
    if (h1) { h1.setAttribute('tabindex', '-1'); h1.focus({preventScroll: true}); }
  });
});

(async function start() {
  lastHash = location.hash;
  try {
    await whoami();
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) { if (token()) clearToken(); gate(token() ? err : null); return; }
    replace(main, errorBox(err));
    return;
  }
  render();
})();
