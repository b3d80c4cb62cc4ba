// The audit log, filtered by address, state, principal and time; each
// record with its before and after, and a revert.

import {h, replace, table, fmtTime, route, addrPath} from './dom.js';
import {request, ApiError, reasonHeaders} from './api.js';
import {errorBox, writeButton, confirmWrite, showReceipt, notify} from './ui.js';
import {show, valueFromBytes, valueFromEnvelope, editText, showDiff} from './values.js';

const FILTERS = ['namespace', 'type', 'id', 'state', 'principal', 'mutation'];
// Ops whose records a revert undoes (the API refuses the others with 409).
const REVERTIBLE = new Set(['put', 'delete', 'delete-all', 'restore', 'cancel', 'cancel-delayed', 'delete-address']);

// localInput converts RFC 3339 to a datetime-local value and back.
function toLocal(t) {
  if (!t) return '';
  const d = new Date(t);
  if (isNaN(d)) return '';
  const pad = (n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

export async function audit(main, ctx) {
  const q = ctx.query;
  const inputs = {};
  // Newest first unless asked otherwise: during an incident the operator
  // wants what changed last.
  const oldest = q.get('order') === 'oldest';
  const order = h('select', {id: 'f-order', name: 'order'},
    h('option', {value: 'newest', selected: !oldest}, 'Newest first'),
    h('option', {value: 'oldest', selected: oldest}, 'Oldest first'));
  const field = (name, label, attrs = {}) => {
    inputs[name] = h('input', Object.assign({id: 'f-' + name, name, type: 'text', autocomplete: 'off', value: q.get(name) || ''}, attrs));
    return h('div', {class: 'field'}, h('label', {for: 'f-' + name}, label), inputs[name]);
  };
  const form = h('form', {class: 'filters', role: 'search', 'aria-label': 'Filter the audit log', onsubmit: (e) => {
    e.preventDefault();
    const p = new URLSearchParams();
    for (const f of FILTERS) if (inputs[f].value.trim()) p.set(f, inputs[f].value.trim());
    for (const f of ['since', 'until']) if (inputs[f].value) p.set(f, new Date(inputs[f].value).toISOString());
    if (order.value === 'oldest') p.set('order', 'oldest');
    location.hash = '#/audit' + (p.toString() ? '?' + p : '');
  }},
  field('namespace', 'Namespace', {size: 10}), field('type', 'Type', {size: 10}), field('id', 'Id', {size: 12}), field('state', 'State', {size: 10}),
  field('principal', 'Principal', {size: 10}),
  field('since', 'Since', {type: 'datetime-local', step: 1, value: toLocal(q.get('since'))}),
  field('until', 'Until', {type: 'datetime-local', step: 1, value: toLocal(q.get('until'))}),
  field('mutation', 'Mutation', {size: 14}),
  h('div', {class: 'field'}, h('label', {for: 'f-order'}, 'Order'), order),
  h('button', {type: 'submit', class: 'primary'}, 'Filter'),
  h('a', {class: 'button', href: '#/audit'}, 'Clear'));
  replace(main, h('div', {class: 'page-head'}, h('div', null, h('h1', null, 'Audit log'),
    h('div', {class: 'muted'}, `Every change an operator or the runtime made, ${oldest ? 'oldest' : 'newest'} first. An address filter needs its namespace and type.`))),
  h('section', {class: 'panel'}, form));

  const params = new URLSearchParams({limit: '100', order: oldest ? 'oldest' : 'newest'});
  for (const f of [...FILTERS, 'since', 'until', 'after']) if (q.get(f)) params.set(f, q.get(f));
  let page;
  try { page = (await request('/audit?' + params)).data; } catch (err) { main.append(errorBox(err)); return; }
  const rows = page.records.map((rec) => ({attrs: {dataset: {mutation: rec.mutation, op: rec.op}}, cells: [
    fmtTime(rec.at),
    h('span', {class: 'badge ' + (rec.op.startsWith('delete') ? 'failing' : rec.op === 'pause' ? 'paused' : 'info')}, rec.op),
    rec.principal,
    [h('a', {href: rec.id ? route('browse', rec.namespace, rec.type, rec.id) : route('browse', rec.namespace, rec.type)}, rec.namespace + '/' + rec.type + (rec.id ? '/' + rec.id : '')),
      rec.state ? [' ', h('a', {href: route('browse', rec.namespace, rec.type, rec.id, rec.state)}, h('code', null, rec.state))] : null],
    rec.reason || h('span', {class: 'muted'}, '—'),
    details(rec),
    {v: REVERTIBLE.has(rec.op) ? writeButton('Revert', {class: 'small', 'aria-label': `Revert mutation ${rec.mutation}`}, () => revert(ctx, rec)) : null, cls: 'actions'},
  ]}));
  const next = page.next ? '#/audit?' + new URLSearchParams(Object.assign(Object.fromEntries(q), {after: page.next})) : null;
  main.append(h('section', {class: 'panel', 'aria-labelledby': 'audit-h'},
    h('h2', {id: 'audit-h'}, 'Records'),
    table('', ['When', 'Operation', 'Principal', 'Address', 'Reason', 'Details', ['', 'actions']], rows, {label: 'Audit records', empty: 'No record matches.'}),
    h('div', {class: 'toolbar'},
      q.get('after') ? h('a', {class: 'button', href: '#/audit?' + new URLSearchParams(Object.fromEntries([...q].filter(([k]) => k !== 'after')))}, 'First page') : null,
      next ? h('a', {class: 'button', href: next, rel: 'next'}, 'Next page') : null)));
}

// details is the record's before and after, loaded when opened: before is
// in the record; after is the entry's history record of this mutation.
function details(rec) {
  const body = h('div', {class: 'audit-detail'});
  const d = h('details', {ontoggle: async () => {
    if (!d.open || body.dataset.loaded) return;
    body.dataset.loaded = '1';
    replace(body, await beforeAfter(rec));
  }}, h('summary', {'aria-label': `Before and after of ${rec.mutation}`}, 'Before / after'), body);
  return d;
}

async function beforeAfter(rec) {
  const before = rec.before ? valueFromBytes(rec.before.typename, rec.before.valueBase64) : null;
  const msgs = (rec.messages || []).length || (rec.delayed || []).length ? messagesOf(rec) : null;
  if (!rec.state) {
    return h('div', null, h('dl', {class: 'kv'}, h('dt', null, 'Mutation'), h('dd', null, h('code', null, rec.mutation)),
      rec.reverts ? [h('dt', null, 'Reverts'), h('dd', null, h('code', null, rec.reverts))] : null), msgs);
  }
  let after = null, afterNote = '';
  if (rec.version) {
    try {
      const path = '/state/' + addrPath(rec.namespace, rec.type, rec.id) + '/' + encodeURIComponent(rec.state) + '/history?limit=100';
      const hist = (await request(path)).data.records;
      const r = hist.find((x) => x.cause && x.cause.mutation === rec.mutation);
      if (r) after = r.deleted ? null : valueFromEnvelope(r);
      else afterNote = `Version ${rec.version}; its value is no longer in the entry's kept history.`;
    } catch (err) { afterNote = err.message; }
  }
  return h('div', null,
    h('dl', {class: 'kv'},
      h('dt', null, 'Mutation'), h('dd', null, h('code', null, rec.mutation)),
      h('dt', null, 'Version'), h('dd', null, `${rec.before ? rec.before.version : '(no value)'} → ${rec.version || '(no value)'}`),
      rec.reverts ? [h('dt', null, 'Reverts'), h('dd', null, h('code', null, rec.reverts))] : null),
    h('div', {class: 'grid2'},
      h('div', null, h('h3', null, 'Before'), show(before)),
      h('div', null, h('h3', null, 'After'), afterNote ? h('p', {class: 'muted'}, afterNote) : show(after))),
    !afterNote ? [h('h3', null, 'Change'), showDiff(editText(before), editText(after), ['before', 'after'])] : null,
    msgs);
}

// messagesOf lists the messages and delayed messages a repair of an inbox
// took away or put back, with their values (for an edit: the message as
// it was before, and the typename it got).
function messagesOf(rec) {
  const valueOf = (v) => v.text != null ? h('pre', {class: 'value'}, v.text) : h('span', null, `${v.length} bytes, base64 `, h('code', null, v.base64));
  const rows = [
    ...(rec.messages || []).map((m) => ({cells: ['message', h('code', null, m.typename), m.caller ? `${m.caller.namespace}/${m.caller.type}/${m.caller.id}` : 'ingress', valueOf(m.value)]})),
    ...(rec.delayed || []).map((d) => ({cells: [`delayed, due ${fmtTime(d.dueAt)}`, h('code', null, d.typename), d.sender ? `${d.sender.namespace}/${d.sender.type}/${d.sender.id}` : 'ingress', valueOf(d.value)]})),
  ];
  return h('div', {class: 'audit-messages'},
    h('h3', null, rec.op === 'edit-message' ? 'The message before the edit' : 'Messages'),
    table('', ['What', 'Type', 'From', 'Value'], rows, {label: 'Messages of ' + rec.mutation}),
    rec.op === 'edit-message' && rec.typename ? h('p', null, 'Its typename after the edit: ', h('code', null, rec.typename)) : null);
}

async function revert(ctx, rec) {
  const ok = await confirmWrite({title: `Revert ${rec.op} ${rec.mutation}?`,
    text: rec.state
      ? `Puts back what ${rec.state} held before, if it still holds version ${rec.version || '(no value)'} — otherwise nothing is changed.`
      : 'Undoes this repair as a new mutation, audited like any other.',
    extra: rec.state ? await beforeAfter(rec) : null,
    confirmLabel: 'Revert'});
  if (!ok) return;
  try {
    const r = await request('/mutations/' + encodeURIComponent(rec.mutation) + '/revert', {method: 'POST', headers: reasonHeaders(ok.reason)});
    showReceipt(`Reverted ${rec.mutation}`, r.data);
    ctx.reload();
  } catch (err) {
    notify('error', 'Not reverted', err instanceof ApiError && err.status === 412 ? 'The entry changed since this mutation: ' + err.message : err.message);
  }
}
