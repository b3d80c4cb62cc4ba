// The overview: every function type at a glance, refreshed live, and the
// failing and paused addresses with their last error one click away.

import {h, replace, table, fmtBytes, fmtNum, fmtTime, ago, route} from './dom.js';
import {request} from './api.js';
import {errorBox} from './ui.js';

const REFRESH_MS = 3000;
let last = null; // the previous overview read, for the invocation rate

export async function overview(main, ctx) {
  const live = h('input', {type: 'checkbox', id: 'live', checked: true});
  const updated = h('span', {class: 'muted', 'aria-live': 'off'});
  const body = h('div', null, h('p', {class: 'muted'}, 'Loading…'));
  replace(main,
    h('div', {class: 'page-head'},
      h('div', null, h('h1', null, 'Overview'), h('div', {class: 'muted'}, 'Every function type, its traffic, what is failing or paused, and how much state it holds.')),
      h('div', {class: 'live'}, live, h('label', {for: 'live'}, 'Refresh live'), updated)),
    body);

  let timer = null;
  const load = async () => {
    try {
      const [ov, failing, pauses] = await Promise.all([
        request('/overview'), request('/failing?limit=100'), request('/pauses')]);
      render(body, ov.data, failing.data, pauses.data);
      updated.textContent = 'updated ' + fmtTime(ov.data.at).slice(11);
    } catch (err) {
      replace(body, errorBox(err));
    }
  };
  const schedule = () => {
    clearTimeout(timer);
    if (live.checked) timer = setTimeout(async () => { await load(); if (ctx.current()) schedule(); }, REFRESH_MS);
  };
  live.addEventListener('change', schedule);
  ctx.onLeave(() => clearTimeout(timer));
  // Resolve once the first figures are shown: the page's first view.
  await load();
  if (ctx.current()) schedule();
}

function rate(t, now) {
  if (!last) return null;
  const prev = last.byType.get(t.namespace + '/' + t.type);
  if (!prev) return null;
  const dt = (now.at - last.at) / 1000;
  if (dt <= 0) return null;
  const d = (t.invocations.ok + t.invocations.error) - (prev.invocations.ok + prev.invocations.error);
  return Math.max(0, d / dt);
}

function render(body, ov, failing, pauses) {
  const now = {at: new Date(ov.at).getTime()};
  const rows = ov.types.map((t) => {
    const r = rate(t, now);
    const name = t.namespace + '/' + t.type;
    const badges = [
      t.typePaused ? h('span', {class: 'badge paused'}, 'type paused') : null,
      !t.registered && t.holdsState ? h('span', {class: 'badge', title: 'No function registers states of this type now'}, 'not deployed') : null,
    ];
    return {attrs: {dataset: {type: name}}, cells: [
      [h('a', {href: route('browse', t.namespace, t.type)}, name), ' ', badges],
      {v: r == null ? '…' : r.toFixed(r < 10 ? 1 : 0) + '/s', cls: 'num'},
      {v: t.invocations.error ? fmtNum(t.invocations.error) : '0', cls: 'num'},
      {v: t.failing ? h('span', {class: 'badge failing'}, fmtNum(t.failing)) : '0', cls: 'num'},
      {v: t.paused ? h('span', {class: 'badge paused'}, fmtNum(t.paused)) : '0', cls: 'num'},
      {v: fmtNum(t.queued), cls: 'num'},
      {v: fmtNum(t.addresses) + (t.complete ? '' : '+'), cls: 'num'},
      {v: t.complete ? fmtBytes(t.stateBytes) : '≈ ' + fmtBytes(Math.max(t.stateBytes, t.estimatedBytes || 0)), cls: 'num'},
    ]};
  });
  last = {at: now.at, byType: new Map(ov.types.map((t) => [t.namespace + '/' + t.type, t]))};

  const sum = (f) => ov.types.reduce((a, t) => a + f(t), 0);
  const nFailing = sum((t) => t.failing), nPaused = sum((t) => t.paused), nQueued = sum((t) => t.queued);
  const stat = (n, l, cls) => h('div', {class: 'stat ' + (cls || '')}, h('div', {class: 'n'}, fmtNum(n)), h('div', {class: 'l'}, l));

  const failRows = failing.failing.map((f) => ({attrs: {dataset: {failing: f.namespace + '/' + f.type + '/' + f.id}}, cells: [
    h('a', {href: route('browse', f.namespace, f.type, f.id)}, f.namespace + '/' + f.type + '/' + f.id),
    {v: String(f.attempts), cls: 'num'},
    [fmtTime(f.since), h('div', {class: 'muted'}, ago(f.since))],
    f.paused ? h('span', {class: 'badge paused'}, 'paused') : f.nextAttempt ? 'retry ' + ago(f.nextAttempt) : 'attempt in flight',
    {v: String(f.messages + f.queued), cls: 'num'},
    h('details', null, h('summary', null, 'Last error'), h('pre', {class: 'lasterror'}, f.lastError || '(none)')),
  ]}));
  const pauseRows = pauses.pauses.map((p) => ({cells: [
    p.id == null ? [h('a', {href: route('browse', p.namespace, p.type)}, p.namespace + '/' + p.type), ' ', h('span', {class: 'badge'}, 'whole type')]
      : h('a', {href: route('browse', p.namespace, p.type, p.id)}, p.namespace + '/' + p.type + '/' + p.id),
    p.principal + (p.auto ? ' (poison policy)' : ''),
    fmtTime(p.since),
    p.expiresAt ? fmtTime(p.expiresAt) : 'never',
    h('span', {class: 'reason'}, p.reason || '—'),
  ]}));

  replace(body,
    h('div', {class: 'stats'},
      stat(ov.types.length, 'function types'),
      stat(nFailing, 'failing addresses', nFailing ? 'bad' : ''),
      stat(nPaused, 'paused addresses', nPaused ? 'warn' : ''),
      stat(nQueued, 'queued messages')),
    h('section', {class: 'panel', 'aria-labelledby': 'types-h'},
      h('h2', {id: 'types-h'}, 'Function types'),
      table('', [['Function type'], ['Invocations', 'num'], ['Errors', 'num'], ['Failing', 'num'], ['Paused', 'num'], ['Queued', 'num'], ['Addresses', 'num'], ['State', 'num']],
        rows, {label: 'Function types', empty: 'No function type is known yet: none registered states or holds state.'}),
      h('p', {class: 'hint'}, 'Invocations per second over the last refresh; errors since the runtime started. Addresses and state are counted up to 10,000 entries per type (“+” and “≈” beyond).')),
    h('section', {class: 'panel', 'aria-labelledby': 'failing-h'},
      h('h2', {id: 'failing-h'}, 'Failing addresses'),
      table('', ['Address', ['Attempts', 'num'], 'Failing since', 'Next', ['Messages', 'num'], 'Error'], failRows,
        {label: 'Failing addresses', empty: 'No address is failing.'}),
      failing.next ? h('p', {class: 'hint'}, 'More failing addresses than shown (the first 100).') : null),
    h('section', {class: 'panel', 'aria-labelledby': 'pauses-h'},
      h('h2', {id: 'pauses-h'}, 'Pauses in force'),
      table('', ['Paused', 'By', 'Since', 'Expires', 'Reason'], pauseRows, {label: 'Pauses in force', empty: 'Nothing is paused.'})));
}
