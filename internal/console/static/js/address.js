// One address: its entries (typed), the states its function registered
// without a value, its inbox — the batch in flight or failing, the queued
// messages, the delayed ones — and the repairs that apply to it.

import {h, replace, table, fmtTime, fmtBytes, ago, route, addrPath} from './dom.js';
import {request, ApiError, reasonHeaders} from './api.js';
import {errorBox, addressCrumbs, writeButton, confirmWrite, showReceipt, notify} from './ui.js';
import {show, valueFromEnvelope, valueFromBytes, editText, showDiff, bytesView, b64ToBytes} from './values.js';

const REFRESH_MS = 2500;

export async function address(main, ctx, ns, type, id) {
  if (ctx.query.get('asOf')) return addressAsOf(main, ctx, ns, type, id, ctx.query.get('asOf'));
  const path = addrPath(ns, type, id);
  const head = h('div', {class: 'page-head'});
  const stateBox = h('section', {class: 'panel', 'aria-labelledby': 'state-h'});
  const inboxBox = h('section', {class: 'panel', 'aria-labelledby': 'inbox-h'});
  const live = h('input', {type: 'checkbox', id: 'live', checked: true});
  replace(main, head, stateBox, inboxBox);

  let timer = null;
  const load = async () => {
    let listing, inbox;
    try {
      [listing, inbox] = await Promise.all([request('/state/' + path), request('/inbox/' + path)]);
    } catch (err) {
      replace(stateBox, errorBox(err));
      return;
    }
    const values = await entryValues(path, listing.data.entries);
    if (!ctx.current()) return;
    renderHead(head, ctx, ns, type, id, inbox.data, listing.data, live);
    renderState(stateBox, ctx, ns, type, id, listing.data, values);
    renderInbox(inboxBox, ctx, ns, type, id, inbox.data);
  };
  const schedule = () => {
    clearTimeout(timer);
    if (live.checked) timer = setTimeout(async () => { if (!document.querySelector('dialog[open]')) await load(); if (ctx.current()) schedule(); }, REFRESH_MS);
  };
  live.addEventListener('change', schedule);
  ctx.onLeave(() => clearTimeout(timer));
  await load();
  schedule();
}

// entryValues reads every entry's value (the listing has sizes and
// versions, not values).
async function entryValues(path, entries) {
  const out = new Map();
  await Promise.all(entries.map(async (e) => {
    try {
      const r = await request('/state/' + path + '/' + encodeURIComponent(e.state), {headers: {Accept: 'application/json'}});
      out.set(e.state, valueFromEnvelope(r.data));
    } catch { /* gone since the listing: shown without a value */ }
  }));
  return out;
}

function renderHead(head, ctx, ns, type, id, inbox, listing, live) {
  const path = addrPath(ns, type, id);
  const failing = inbox.inflight && inbox.inflight.attempt > 0;
  const reload = () => ctx.reload();
  replace(head,
    h('div', null,
      addressCrumbs(ns, type, id),
      h('h1', null, id, ' ',
        inbox.paused ? h('span', {class: 'badge paused', dataset: {status: 'paused'}}, 'paused') : null,
        inbox.typePaused ? h('span', {class: 'badge paused'}, 'type paused') : null,
        failing ? h('span', {class: 'badge failing', dataset: {status: 'failing'}}, 'failing') : null,
        !inbox.paused && !failing ? h('span', {class: 'badge ok', dataset: {status: 'running'}}, 'running') : null),
      inbox.paused ? h('div', {class: 'muted'}, `Paused by ${inbox.paused.principal} ${ago(inbox.paused.since)}` + (inbox.paused.reason ? `: ${inbox.paused.reason}` : '')) : null),
    h('div', {class: 'toolbar'},
      h('span', {class: 'live'}, live, h('label', {for: 'live'}, 'Refresh live')),
      h('a', {class: 'button', href: '#/audit?' + new URLSearchParams({namespace: ns, type, id})}, 'Audit log'),
      inbox.paused
        ? writeButton('Resume', {class: 'primary'}, async () => {
          const ok = await confirmWrite({title: `Resume ${id}?`, text: 'A failed batch is retried at once, then the queued messages run in arrival order.', confirmLabel: 'Resume'});
          if (!ok) return;
          try { showReceipt('Resumed', (await request('/resume/' + path, {method: 'POST', body: {reason: ok.reason}})).data); } catch (err) { notify('error', 'Resume failed', err.message); }
          reload();
        })
        : writeButton('Pause', null, async () => {
          const ok = await confirmWrite({title: `Pause ${id}?`, text: 'Nothing of this address is invoked until it is resumed; its messages keep arriving and wait. State can still be read and repaired.', confirmLabel: 'Pause'});
          if (!ok) return;
          try { showReceipt('Paused', (await request('/pause/' + path, {method: 'POST', body: {reason: ok.reason}})).data); } catch (err) { notify('error', 'Pause failed', err.message); }
          reload();
        }),
      listing.entries.length ? writeButton('Delete all entries', {class: 'danger'}, async () => {
        const ok = await confirmWrite({title: `Delete every entry of ${id}?`, text: `${listing.entries.length} entr${listing.entries.length === 1 ? 'y' : 'ies'} will be deleted in the address's mailbox order. Revertible from the audit log.`, confirmLabel: 'Delete all entries', danger: true});
        if (!ok) return;
        try { showReceipt('Entries deleted', (await request('/state/' + path, {method: 'DELETE', headers: reasonHeader(ok.reason)})).data); } catch (err) { notify('error', 'Delete failed', err.message); }
        reload();
      }) : null,
      writeButton('Delete address', {class: 'danger', disabled: !inbox.paused, title: inbox.paused ? null : 'Pause the address first'}, async () => {
        const ok = await confirmWrite({title: `Delete the address ${id} entirely?`,
          text: 'Every state entry, every message of its inbox (the failed batch too) and the delayed messages it sent or that wait for it, in one commit. It stays paused. Revertible from the audit log.',
          confirmLabel: 'Delete address', danger: true});
        if (!ok) return;
        try { showReceipt('Address deleted', (await request('/addresses/' + path, {method: 'DELETE', body: {reason: ok.reason}})).data); } catch (err) { notify('error', 'Delete failed', err.message); }
        reload();
      })));
}

const reasonHeader = reasonHeaders;

function renderState(box, ctx, ns, type, id, listing, values) {
  const path = addrPath(ns, type, id);
  const held = new Set(listing.entries.map((e) => e.state));
  const rows = listing.entries.map((e) => ({attrs: {dataset: {state: e.state}}, cells: [
    [h('a', {href: route('browse', ns, type, id, e.state)}, e.state), e.registered ? null : [' ', h('span', {class: 'badge', title: 'The function does not register this state now'}, 'not registered')]],
    {v: h('code', null, e.typename), cls: 'hide-narrow'},
    show(values.get(e.state), {compact: true}),
    {v: fmtBytes(e.size), cls: 'num hide-narrow'},
    {v: e.version, cls: 'num hide-narrow'},
    e.expiresAt ? [fmtTime(e.expiresAt), h('div', {class: 'muted'}, ago(e.expiresAt))] : h('span', {class: 'muted'}, 'never'),
    {v: [
      h('a', {class: 'button small', href: route('browse', ns, type, id, e.state), 'aria-label': `Open ${e.state}`}, 'Open'),
      writeButton('Delete', {class: 'small danger', 'aria-label': `Delete ${e.state}`}, async () => {
        const ok = await confirmWrite({title: `Delete ${e.state}?`, text: 'The entry is deleted in the address\'s mailbox order, if it still holds version ' + e.version + '. Revertible from the audit log.', confirmLabel: 'Delete', danger: true,
          extra: h('div', null, h('h3', null, 'Current value'), show(values.get(e.state)))});
        if (!ok) return;
        try {
          showReceipt(`Deleted ${e.state}`, (await request('/state/' + path + '/' + encodeURIComponent(e.state), {method: 'DELETE', headers: Object.assign({'If-Match': '"' + e.version + '"'}, reasonHeader(ok.reason))})).data);
        } catch (err) {
          notify('error', `${e.state} was not deleted`, err instanceof ApiError && err.status === 412 ? 'It changed since the page was loaded; look at it again.' : err.message);
        }
        ctx.reload();
      }),
    ], cls: 'actions'},
  ]}));
  const unset = listing.registered.filter((s) => !held.has(s.state)).map((s) => ({attrs: {dataset: {state: s.state}}, cells: [
    h('a', {href: route('browse', ns, type, id, s.state)}, s.state),
    {v: h('code', null, s.typename), cls: 'hide-narrow'},
    h('span', {class: 'empty'}, 'no value'),
    {v: '—', cls: 'num hide-narrow'}, {v: '—', cls: 'num hide-narrow'},
    s.expiration !== 'none' ? `${s.expiration} ${s.expireAfter || ''}` : h('span', {class: 'muted'}, 'never'),
    {v: h('a', {class: 'button small', href: route('browse', ns, type, id, s.state), 'aria-label': `Open ${s.state}`}, 'Open'), cls: 'actions'},
  ]}));
  replace(box,
    h('h2', {id: 'state-h'}, 'State', h('a', {class: 'button small', href: '#/audit?' + new URLSearchParams({namespace: ns, type, id})}, 'Changes in the audit log')),
    table('', ['State', ['Type', 'hide-narrow'], 'Value', ['Size', 'num hide-narrow'], ['Version', 'num hide-narrow'], 'Expires', ['', 'actions']], [...rows, ...unset],
      {label: 'State entries', empty: 'This address holds no state, and its function registers none.'}));
}

function messageRows(ctx, ns, type, id, msgs, opts) {
  const path = addrPath(ns, type, id);
  return msgs.map((m, i) => ({attrs: {dataset: {key: m.key}}, cells: [
    h('code', null, m.key),
    m.mutation ? h('span', {class: 'badge info'}, 'operator mutation ' + m.mutation) : h('code', null, m.typename),
    m.value ? messageValue(m) : h('span', {class: 'muted'}, '—'),
    m.caller ? m.caller.namespace + '/' + m.caller.type + '/' + m.caller.id : h('span', {class: 'muted'}, 'ingress'),
    {v: fmtBytes(m.size), cls: 'num hide-narrow'},
    [fmtTime(m.arrivedAt), h('div', {class: 'muted'}, ago(m.arrivedAt))],
    {v: m.mutation ? null : [
      writeButton('Skip', {class: 'small', 'aria-label': `Skip message ${m.key}`}, async () => {
        const ok = await confirmWrite({title: `Skip message ${m.key}?`,
          text: 'The message moves to the message dead letters, from where it can be re-sent later.' + (opts.inflight ? ' The rest of the failed batch goes back to the head of the queue.' : '') + (opts.paused ? '' : ' The address is not paused: the message may be invoked before the skip takes its turn; pause it first.'),
          confirmLabel: 'Skip message'});
        if (!ok) return;
        try { showReceipt(`Skipped ${m.key}`, (await request('/inbox/' + path + '/skip', {method: 'POST', body: {key: m.key, reason: ok.reason}})).data); } catch (err) { notify('error', 'Skip failed', err.message); }
        ctx.reload();
      }),
      writeButton('Edit', {class: 'small', 'aria-label': `Edit message ${m.key}`}, () => editMessage(ctx, path, m, opts)),
      opts.inflight ? null : writeButton('Cancel', {class: 'small danger', 'aria-label': `Cancel message ${m.key}`}, async () => {
        const ok = await confirmWrite({title: `Cancel message ${m.key}?`, text: 'The message is dropped. A revert from the audit log puts it back at the end of the inbox.', confirmLabel: 'Cancel message', danger: true});
        if (!ok) return;
        try { showReceipt(`Cancelled ${m.key}`, (await request('/inbox/' + path + '/cancel', {method: 'POST', body: {key: m.key, reason: ok.reason}})).data); } catch (err) { notify('error', 'Cancel failed', err.message); }
        ctx.reload();
      }),
    ], cls: 'actions'},
  ]}));
}

// messageValue shows a message's value as an entry's is shown (the first
// 4 KiB of it: GET /inbox bounds what it sends).
function messageValue(m) {
  const v = valueFromBytes(m.typename, m.value.base64);
  const text = v.kind === 'bytes' ? utf8(m.value.base64) : null;
  return h('div', {class: 'msg-value', dataset: {kind: v.kind}},
    text != null ? bytesView({length: m.size, base64: m.value.base64, text}) : show(v, {compact: true}),
    m.value.truncated ? h('div', {class: 'hint'}, `The first ${fmtBytes(4096)} of ${fmtBytes(m.size)}.`) : null);
}

// utf8 is the text of base64 bytes when they are UTF-8, else null.
function utf8(base64) {
  try { return new TextDecoder('utf-8', {fatal: true}).decode(b64ToBytes(base64)); } catch { return null; }
}

// editMessage replaces the typename and value of a message where it
// waits (POST /inbox/…/edit). The form starts from the message's value
// (as GET /inbox shows it) and shows the change as a diff, as an entry's
// edit does; the value it replaces is also kept in the edit's audit
// record, which the receipt links to.
async function editMessage(ctx, path, m, opts) {
  const before = m.value && !m.value.truncated ? valueFromBytes(m.typename, m.value.base64) : null;
  // JSON and other UTF-8 bytes are edited as their own text (JSON not
  // pretty-printed: the message keeps the bytes the operator does not
  // change); other bytes as base64.
  const raw = before && (before.kind === 'json' || before.kind === 'bytes') ? utf8(m.value.base64) : null;
  const asBytes = before && before.kind === 'bytes' && raw == null;
  const beforeText = !before ? '' : raw != null ? raw : editText(before, 'base64');
  const typename = h('input', {id: 'msg-typename', name: 'typename', type: 'text', autocomplete: 'off', required: true, value: m.typename, 'aria-describedby': 'msg-typename-hint'});
  const format = h('select', {id: 'msg-format', name: 'format'}, h('option', {value: 'text', selected: !asBytes}, 'text (UTF-8)'), h('option', {value: 'base64', selected: asBytes}, 'base64 (any bytes)'));
  const value = h('textarea', {id: 'msg-value', name: 'value', rows: 6, spellcheck: 'false', required: true});
  value.value = beforeText;
  const diff = h('div', {id: 'msg-diff', 'aria-live': 'polite'});
  const redraw = () => replace(diff, before ? showDiff(beforeText, value.value) : null);
  value.addEventListener('input', redraw);
  redraw();
  const extra = h('div', null,
    h('p', {class: 'muted'}, (before ? 'The form starts from the message\'s value. ' : 'The message\'s value is longer than the console shows: type the whole new value. ') +
      'The message keeps its place' + (opts.inflight ? ' in the failed batch, which a resume retries with it.' : ' in the queue.')),
    h('div', {class: 'field'}, h('label', {for: 'msg-typename'}, 'Typename'), typename,
      h('div', {class: 'hint', id: 'msg-typename-hint'}, `Now ${m.typename}; keep it to change only the value.`)),
    h('div', {class: 'field'}, h('label', {for: 'msg-format'}, 'Value as'), format),
    h('div', {class: 'field'}, h('label', {for: 'msg-value'}, 'New value'), value),
    diff);
  const ok = await confirmWrite({title: `Edit message ${m.key}?`, extra, confirmLabel: 'Edit message',
    validate: () => {
      if (!typename.value.trim()) return [typename, 'Give the message\'s typename (the current one to keep it).'];
      if (format.value === 'base64' && !/^[A-Za-z0-9+/]*={0,2}$/.test(value.value.trim())) return [value, 'The value is not base64.'];
      return null;
    }});
  if (!ok) return;
  const body = {key: m.key, typename: typename.value.trim(), reason: ok.reason};
  if (format.value === 'base64') body.value = value.value.trim(); else body.text = value.value;
  try { showReceipt(`Edited ${m.key}`, (await request('/inbox/' + path + '/edit', {method: 'POST', body})).data); } catch (err) { notify('error', 'Edit failed', err.message); }
  ctx.reload();
}

function renderInbox(box, ctx, ns, type, id, inbox) {
  const path = addrPath(ns, type, id);
  const f = inbox.inflight;
  const msgHeaders = ['Key', 'Type', 'Value', 'From', ['Size', 'num hide-narrow'], 'Arrived', ['', 'actions']];
  const delayedRows = inbox.delayed.map((d) => ({attrs: {dataset: {timer: d.timer}}, cells: [
    [fmtTime(d.dueAt), h('div', {class: 'muted'}, ago(d.dueAt))],
    d.sender ? d.sender.namespace + '/' + d.sender.type + '/' + d.sender.id : h('span', {class: 'muted'}, 'ingress'),
    d.token ? h('code', null, d.token) : h('span', {class: 'muted'}, 'none'),
    h('code', null, d.typename),
    {v: fmtBytes(d.size), cls: 'num hide-narrow'},
    {v: writeButton('Cancel', {class: 'small danger', 'aria-label': `Cancel delayed message ${d.timer}`}, async () => {
      const ok = await confirmWrite({title: 'Cancel this delayed message?', text: `Due ${fmtTime(d.dueAt)}. A revert from the audit log makes it due again at its time.`, confirmLabel: 'Cancel delayed message', danger: true});
      if (!ok) return;
      try { showReceipt('Delayed message cancelled', (await request('/inbox/' + path + '/cancel', {method: 'POST', body: {timer: d.timer, reason: ok.reason}})).data); } catch (err) { notify('error', 'Cancel failed', err.message); }
      ctx.reload();
    }), cls: 'actions'},
  ]}));
  replace(box,
    h('h2', {id: 'inbox-h'}, 'Inbox'),
    h('div', {class: 'grid2'},
      h('div', null,
        h('h3', null, 'Batch in flight'),
        f ? h('div', {dataset: {inflight: f.attempt}},
          h('dl', {class: 'kv'},
            h('dt', null, 'Attempts failed'), h('dd', null, String(f.attempt)),
            h('dt', null, 'State'), h('dd', null, f.waiting ? (inbox.paused || inbox.typePaused ? 'held by the pause' : 'waiting to retry ' + ago(f.nextAttempt)) : 'being invoked'),
            f.since ? [h('dt', null, 'Failing since'), h('dd', null, fmtTime(f.since))] : null),
          f.lastError ? [h('h3', null, 'Last error'), h('pre', {class: 'lasterror'}, f.lastError)] : null)
          : h('p', {class: 'empty'}, 'Nothing in flight.')),
      h('div', null,
        h('h3', null, 'Queue'),
        h('dl', {class: 'kv'},
          h('dt', null, 'Queued messages'), h('dd', {dataset: {queued: inbox.queued.count}}, String(inbox.queued.count)),
          h('dt', null, 'Oldest'), h('dd', null, inbox.queued.oldestAt ? fmtTime(inbox.queued.oldestAt) + ' (' + ago(inbox.queued.oldestAt) + ')' : '—')))),
    f && f.messages.length ? [h('h3', null, 'Messages of the batch'), table('', msgHeaders, messageRows(ctx, ns, type, id, f.messages, {inflight: true, paused: !!inbox.paused}), {label: 'Messages of the batch in flight'})] : null,
    h('h3', null, 'Queued messages'),
    table('', msgHeaders, messageRows(ctx, ns, type, id, inbox.queued.messages, {paused: !!inbox.paused}), {label: 'Queued messages', empty: 'No message waits.'}),
    inbox.queued.truncated ? h('p', {class: 'hint'}, `The first ${inbox.queued.messages.length} of ${inbox.queued.count}.`) : null,
    inbox.queued.pagedInPartition > 0 ? h('p', {class: 'hint', dataset: {paged: inbox.queued.pagedInPartition}},
      `${inbox.queued.pagedInPartition} more messages of this partition wait in the store, past its bound in memory; some may be for this address. They are listed here once the partition has room for them.`) : null,
    h('h3', null, 'Delayed messages'),
    table('', ['Due', 'Sender', 'Token', 'Type', ['Size', 'num hide-narrow'], ['', 'actions']], delayedRows, {label: 'Delayed messages', empty: 'No delayed message is pending for this address.'}));
}

// addressAsOf shows every entry of an address as it was at a commit, with
// a restore of the whole address to that point.
async function addressAsOf(main, ctx, ns, type, id, asOf) {
  const path = addrPath(ns, type, id);
  replace(main, h('div', {class: 'page-head'}, h('div', null, addressCrumbs(ns, type, id), h('h1', null, id, ' as of commit ', h('code', null, asOf)))));
  let past;
  try { past = (await request('/state/' + path + '?asOf=' + encodeURIComponent(asOf))).data; } catch (err) { main.append(errorBox(err)); return; }
  const rows = past.entries.map((e) => ({cells: [
    h('a', {href: route('browse', ns, type, id, e.state)}, e.state),
    e.value ? h('code', null, e.value.typename) : '—',
    e.value ? show(valueFromEnvelope(e.value), {compact: true}) : h('span', {class: 'empty'}, e.known ? 'no value' : 'unknown (history no longer reaches back)'),
  ]}));
  main.append(h('section', {class: 'panel'},
    h('h2', null, 'Entries then', writeButton('Restore address to this point', {class: 'primary'}, async () => {
      const ok = await confirmWrite({title: `Restore ${id} to commit ${asOf}?`, text: 'Each entry changed since is set back, each created since is deleted, as one mutation in the address\'s mailbox order. Revertible from the audit log.', confirmLabel: 'Restore'});
      if (!ok) return;
      try { showReceipt('Address restored', (await request('/state/' + path + '?asOf=' + encodeURIComponent(asOf), {method: 'POST', headers: reasonHeader(ok.reason)})).data); location.hash = route('browse', ns, type, id); } catch (err) { notify('error', 'Restore failed', err.message); }
    })),
    past.complete ? null : h('p', {class: 'notice warn'}, 'Some entries may have held a value then that can no longer be known.'),
    table('', ['State', 'Type', 'Value'], rows, {label: 'Entries as of commit ' + asOf, empty: 'The address held nothing then.'}),
    h('p', null, h('a', {href: route('browse', ns, type, id)}, 'Back to the present'))));
}
