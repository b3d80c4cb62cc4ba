// The bulk jobs (docs/how-to/bulk-jobs.md): every job kept, newest first,
// with its progress, counters and what it does. Read from GET /jobs,
// refreshed live. Jobs are started, paused and reverted with
// `statefun jobs` or the API.

import {h, replace, table, fmtTime} from './dom.js';
import {request} from './api.js';
import {errorBox} from './ui.js';

const REFRESH_MS = 2000;

export async function jobs(main, ctx) {
  const body = h('div', null, h('p', {class: 'muted'}, 'Loading…'));
  replace(main,
    h('div', {class: 'page-head'},
      h('div', null, h('h1', null, 'Jobs'), h('div', {class: 'muted'}, 'Bulk repair and migration jobs and their progress; run them with statefun jobs.'))),
    body);
  let timer = null;
  const load = async () => {
    try { render(body, (await request('/jobs')).data.jobs); } catch (err) { replace(body, errorBox(err)); }
  };
  const schedule = () => {
    clearTimeout(timer);
    timer = setTimeout(async () => { await load(); if (ctx.current()) schedule(); }, REFRESH_MS);
  };
  ctx.onLeave(() => clearTimeout(timer));
  await load();
  if (ctx.current()) schedule();
}

// what says what a job does on one line.
function what(j) {
  if (j.kind === 'revert') return 'revert of ' + j.reverts;
  const s = j.spec.select, a = j.spec.action;
  const parts = [s.orphans ? 'orphans' : '', s.type || '', s.idPrefix ? 'ids ' + s.idPrefix + '…' : '',
    s.state ? 'state ' + s.state : '', s.where ? 'where ' + s.where : '', a.op === 'set' ? 'set ' + a.expr : 'delete'];
  return parts.filter(Boolean).join(', ');
}

function render(body, list) {
  const badge = {running: 'ok', paused: 'paused', failed: 'failing', cancelled: 'paused', done: 'ok'};
  const rows = list.map((j) => {
    const done = j.total > 0 ? Math.min(j.counts.scanned / j.total, 1) : 1;
    return {attrs: {dataset: {job: j.id, status: j.status}}, cells: [
      h('code', null, j.id),
      h('span', {class: 'badge ' + (badge[j.status] || '')}, j.status),
      [h('progress', {max: '100', value: String(Math.round(done * 100)), 'aria-label': 'progress of job ' + j.id}),
        h('span', {class: 'muted'}, ` ${Math.round(done * 100)}% · ${j.counts.scanned}/${j.total}` +
          (j.pace ? ` · ${Math.round(j.pace.rate)}/s` : ''))],
      {v: String(j.counts.changed), cls: 'num'},
      {v: String(j.counts.conflicts), cls: 'num'},
      {v: String(j.counts.failed), cls: 'num'},
      fmtTime(j.createdAt),
      h('span', {title: j.error || ''}, what(j)),
    ]};
  });
  replace(body, h('section', {class: 'panel'},
    table('', ['Job', 'Status', 'Progress', ['Changed', 'num'], ['Conflicts', 'num'], ['Failed', 'num'], 'Created', 'What'], rows,
      {label: 'Jobs', empty: 'No job.'})));
}
