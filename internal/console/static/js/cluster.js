// The cluster (cluster mode): every node, what it serves and restores,
// how far behind its fetching is, its last commit; the partitions nobody
// owns. Read from GET /cluster, refreshed live.

import {h, replace, table, fmtTime, ago} from './dom.js';
import {request} from './api.js';
import {errorBox} from './ui.js';

const REFRESH_MS = 3000;

export async function cluster(main, ctx) {
  const body = h('div', null, h('p', {class: 'muted'}, 'Loading…'));
  replace(main,
    h('div', {class: 'page-head'},
      h('div', null, h('h1', null, 'Cluster'), h('div', {class: 'muted'}, 'Every node, the partitions it serves and restores, its fetch lag and its last commit.'))),
    body);
  let timer = null;
  const load = async () => {
    try { render(body, (await request('/cluster')).data); } catch (err) { replace(body, errorBox(err)); }
  };
  const schedule = () => {
    clearTimeout(timer);
    timer = setTimeout(async () => { await load(); if (ctx.current()) schedule(); }, REFRESH_MS);
  };
  ctx.onLeave(() => clearTimeout(timer));
  await load();
  if (ctx.current()) schedule();
}

function render(body, c) {
  const parts = (ps) => ps.length ? ps.join(', ') : '—';
  const lag = (l) => {
    const total = Object.values(l).reduce((a, b) => a + b, 0);
    return total === 0 ? '0' : String(total);
  };
  const rows = c.nodes.map((n) => ({attrs: {dataset: {node: n.node}}, cells: [
    [h('strong', null, n.node), h('div', {class: 'muted'}, n.adminURL)],
    !n.answered ? h('span', {class: 'badge failing'}, 'no answer')
      : n.ready ? h('span', {class: 'badge ok'}, 'ready') : h('span', {class: 'badge paused', title: n.notReady || ''}, 'not ready'),
    parts(n.serving),
    parts(n.restoring),
    {v: n.answered ? lag(n.lag) : '—', cls: 'num'},
    n.lastCommit ? [fmtTime(n.lastCommit), h('div', {class: 'muted'}, ago(n.lastCommit))] : '—',
    {v: n.answered ? `${n.commits} / ${n.aborts}` : '—', cls: 'num hide-narrow'},
    {v: n.answered && n.generation != null ? String(n.generation) : '—', cls: 'num hide-narrow'},
  ]}));
  replace(body,
    h('section', {class: 'panel'},
      h('dl', {class: 'kv'},
        h('dt', null, 'Application'), h('dd', null, c.app),
        h('dt', null, 'Partitions'), h('dd', null, String(c.partitions)),
        h('dt', null, 'Group'), h('dd', {dataset: {group: c.groupState}}, c.groupState || ('unreadable: ' + (c.groupError || ''))),
        h('dt', null, 'Unowned partitions'), h('dd', {dataset: {unowned: c.unowned.length}}, parts(c.unowned)))),
    h('section', {class: 'panel'},
      h('h2', null, 'Nodes'),
      table('', ['Node', 'State', 'Serving', 'Restoring', ['Lag', 'num'], 'Last commit', ['Commits / aborts', 'num hide-narrow'], ['Generation', 'num hide-narrow']], rows,
        {label: 'Nodes of the cluster', empty: 'No node.'})));
}
