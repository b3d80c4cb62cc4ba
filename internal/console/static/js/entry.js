// One entry: its value (typed), the typed editor whose change is shown as
// a diff against the current value before it is written with If-Match, the
// conflict when someone else wrote in between, and the entry's history
// with point-in-time views and restore.

import {h, replace, table, fmtTime, ago, route, addrPath} from './dom.js';
import {request, ApiError, reasonHeaders} from './api.js';
import {errorBox, addressCrumbs, writeButton, confirmWrite, showReceipt, notify, causeText} from './ui.js';
import {show, valueFromEnvelope, parseEdit, editText, showDiff} from './values.js';

// load reads an entry: its value and version, or that it has none, with
// the typename and expiration its function registered.
async function load(path, state) {
  const [listing, entry] = await Promise.all([
    request('/state/' + path),
    request('/state/' + path + '/' + encodeURIComponent(state), {headers: {Accept: 'application/json'}}).catch((err) => {
      if (err instanceof ApiError && err.status === 404) return null;
      throw err;
    })]);
  const spec = listing.data.registered.find((s) => s.state === state) || null;
  const info = listing.data.entries.find((e) => e.state === state) || null;
  if (!entry) return {value: null, version: null, expiresAt: null, typename: spec ? spec.typename : null, spec};
  return {value: valueFromEnvelope(entry.data), version: entry.data.version, expiresAt: entry.data.expiresAt || null,
    typename: entry.data.typename, spec, registered: info ? info.registered : !!spec};
}

// lastChange is the newest record of the entry's history: who wrote it.
async function lastChange(path, state) {
  try {
    const r = await request('/state/' + path + '/' + encodeURIComponent(state) + '/history?limit=1');
    return r.data.records[0] || null;
  } catch { return null; }
}

export async function entry(main, ctx, ns, type, id, state) {
  const path = addrPath(ns, type, id);
  const statePath = '/state/' + path + '/' + encodeURIComponent(state);
  replace(main, h('div', {class: 'page-head'}, h('div', null, addressCrumbs(ns, type, id, state), h('h1', null, state))));
  let cur;
  try { cur = await load(path, state); } catch (err) { main.append(errorBox(err)); return; }
  if (!cur.value && !cur.spec) {
    main.append(h('section', {class: 'panel'}, h('p', {class: 'empty'}, 'This entry has no value, and the function does not register this state.')), historyPanel(ctx, ns, type, id, state));
    return;
  }

  const valueBox = h('section', {class: 'panel', 'aria-labelledby': 'value-h'});
  const editBox = h('section', {class: 'panel', 'aria-labelledby': 'edit-h', hidden: true});
  const conflictBox = h('div');
  main.append(conflictBox, valueBox, editBox);
  ctx.query.get('asOf') ? main.append(asOfPanel(ctx, ns, type, id, state, ctx.query.get('asOf'), cur)) : null;
  main.append(historyPanel(ctx, ns, type, id, state));

  const renderValue = () => replace(valueBox,
    h('h2', {id: 'value-h'}, 'Value', h('span', {class: 'toolbar'},
      writeButton(cur.value ? 'Edit' : 'Set value', {class: 'primary', id: 'edit-button'}, () => openEditor()),
      cur.value ? writeButton('Delete', {class: 'danger'}, () => del()) : null)),
    h('dl', {class: 'kv'},
      h('dt', null, 'Type'), h('dd', null, h('code', null, cur.typename || '—'), cur.spec ? null : [' ', h('span', {class: 'badge'}, 'not registered')]),
      h('dt', null, 'Version'), h('dd', {dataset: {version: cur.version || ''}}, cur.version || '—'),
      h('dt', null, 'Expires'), h('dd', null, cur.expiresAt ? `${fmtTime(cur.expiresAt)} (${ago(cur.expiresAt)})` : cur.spec && cur.spec.expiration !== 'none' ? `${cur.spec.expiration} ${cur.spec.expireAfter || ''}` : 'never'),
      h('dt', null, 'Value'), h('dd', {id: 'current-value'}, show(cur.value))));
  renderValue();

  async function del() {
    const ok = await confirmWrite({title: `Delete ${state}?`, text: `Deleted in the address's mailbox order, if it still holds version ${cur.version}. Revertible from the audit log.`,
      extra: h('div', null, h('h3', null, 'Current value'), show(cur.value)), confirmLabel: 'Delete', danger: true});
    if (!ok) return;
    try {
      showReceipt(`Deleted ${state}`, (await request(statePath, {method: 'DELETE', headers: Object.assign({'If-Match': '"' + cur.version + '"'}, reasonHeaders(ok.reason))})).data);
      ctx.reload();
    } catch (err) {
      if (err instanceof ApiError && err.status === 412) return conflict(null);
      notify('error', `${state} was not deleted`, err.message);
    }
  }

  // The editor: typed input, then a diff against the value it was opened
  // on, then a write conditional on that value's version.
  let base = null; // {value, version} the edit started from
  let fmt = 'base64';
  function openEditor(text) {
    base = {value: cur.value, version: cur.version};
    const kind = cur.value ? cur.value.kind : kindForNew(cur.typename);
    const err = h('div', {class: 'error-text', role: 'alert', id: 'edit-error'});
    let input;
    if (kind === 'bool') {
      input = h('select', {id: 'edit-value', name: 'value'}, ['true', 'false'].map((v) => h('option', {value: v, selected: (text ?? editText(cur.value)) === v}, v)));
    } else if (['int', 'long', 'float', 'double'].includes(kind)) {
      input = h('input', {id: 'edit-value', name: 'value', type: 'text', inputmode: 'decimal', autocomplete: 'off', value: text ?? editText(cur.value)});
    } else {
      input = h('textarea', {id: 'edit-value', name: 'value', spellcheck: 'false', rows: Math.min(24, Math.max(6, (text ?? editText(cur.value, fmt)).split('\n').length + 1))}, text ?? editText(cur.value, fmt));
    }
    const fmtSelect = kind === 'bytes' ? h('div', {class: 'field'}, h('label', {for: 'edit-format'}, 'Bytes as'),
      h('select', {id: 'edit-format', onchange: (e) => { fmt = e.target.value; input.value = editText(cur.value, fmt); }},
        h('option', {value: 'base64', selected: fmt === 'base64'}, 'base64'), h('option', {value: 'hex', selected: fmt === 'hex'}, 'hex'))) : null;
    editBox.hidden = false;
    replace(editBox,
      h('h2', {id: 'edit-h'}, cur.value ? 'Edit value' : 'Set value'),
      h('form', {onsubmit: (e) => { e.preventDefault(); review(kind, input.value, err); }},
        fmtSelect,
        h('div', {class: 'field'},
          h('label', {for: 'edit-value'}, `New value (${cur.typename}, ${kind === 'json' ? 'JSON' : kind})`),
          input,
          h('div', {class: 'hint'}, `Written only if the entry still holds version ${base.version || '(no value)'}; you will see the change as a diff first.`)),
        err,
        h('div', {class: 'toolbar'},
          h('button', {type: 'submit', class: 'primary', id: 'review-button'}, 'Review change'),
          h('button', {type: 'button', onclick: () => { editBox.hidden = true; document.getElementById('edit-button')?.focus(); }}, 'Cancel'))));
    input.focus();
  }

  async function review(kind, text, errBox) {
    errBox.textContent = '';
    let body;
    try { body = parseEdit(kind, text, fmt); } catch (e) { errBox.textContent = e.message; return; }
    const before = editText(base.value, fmt);
    const after = kind === 'json' ? text : kind === 'bytes' ? text.trim() : text;
    const ok = await confirmWrite({
      title: `Write ${state}?`,
      text: base.version ? `The change against version ${base.version}:` : 'The entry has no value now; it will get:',
      extra: showDiff(before, after),
      confirmLabel: 'Write value'});
    if (!ok) return;
    try {
      const headers = Object.assign({'Content-Type': body.contentType, 'Statefun-Type': cur.typename},
        base.version ? {'If-Match': '"' + base.version + '"'} : {'If-None-Match': '*'}, reasonHeaders(ok.reason));
      const r = await request(statePath, {method: 'PUT', headers, body: body.body});
      showReceipt(`Wrote ${state}`, r.data);
      ctx.reload();
    } catch (err) {
      if (err instanceof ApiError && err.status === 412) return conflict({kind, text: after});
      errBox.textContent = (err instanceof ApiError ? err.status + ': ' : '') + err.message;
    }
  }

  // conflict: the entry changed between opening and saving. Nothing was
  // written; show what it holds now and who wrote it, and let the
  // operator review their change against that.
  async function conflict(mine) {
    const was = base ? base.version : cur.version;
    try { cur = await load(path, state); } catch (err) { replace(conflictBox, errorBox(err)); return; }
    const change = await lastChange(path, state);
    renderValue();
    editBox.hidden = true;
    replace(conflictBox, h('section', {class: 'panel conflict', role: 'alert', 'aria-labelledby': 'conflict-h', dataset: {conflict: '1'}},
      h('h2', {id: 'conflict-h'}, 'Not written: the entry changed since you opened it'),
      h('p', null, `You started from version ${was || '(no value)'}; it now holds ${cur.version ? 'version ' + cur.version : 'no value'}. Nothing was overwritten.`),
      h('dl', {class: 'kv'},
        h('dt', null, 'Changed by'), h('dd', {id: 'conflict-by'}, change ? causeText(change.cause) : 'unknown (no history)'),
        h('dt', null, 'At'), h('dd', null, change ? fmtTime(change.at) : '—'),
        h('dt', null, 'Value now'), h('dd', {id: 'conflict-value'}, show(cur.value))),
      mine ? [h('h3', null, 'Your change, against the value now'), showDiff(editText(cur.value, fmt), mine.text, ['current', 'your'])] : null,
      h('div', {class: 'toolbar'},
        mine ? writeButton('Edit again from the value now', {class: 'primary'}, () => { replace(conflictBox); openEditor(mine.text); }) : null,
        h('button', {type: 'button', onclick: () => { replace(conflictBox); ctx.reload(); }}, 'Discard my change'))));
    conflictBox.querySelector('h2').setAttribute('tabindex', '-1');
    conflictBox.querySelector('h2').focus();
  }
}

function kindForNew(typename) {
  const scalars = {bool: 1, int: 1, long: 1, float: 1, double: 1, string: 1};
  const k = (typename || '').replace('io.statefun.types/', '');
  if (typename && typename.startsWith('io.statefun.types/') && scalars[k]) return k;
  return 'json';
}

// historyPanel lists the entry's committed changes, newest first, each
// viewable at that point, and restorable.
function historyPanel(ctx, ns, type, id, state) {
  const path = addrPath(ns, type, id);
  const box = h('section', {class: 'panel', 'aria-labelledby': 'history-h'}, h('h2', {id: 'history-h'}, 'History'), h('p', {class: 'muted'}, 'Loading…'));
  const after = ctx.query.get('after');
  (async () => {
    let page;
    try {
      page = (await request('/state/' + path + '/' + encodeURIComponent(state) + '/history?limit=20' + (after ? '&after=' + encodeURIComponent(after) : ''))).data;
    } catch (err) { replace(box, h('h2', {id: 'history-h'}, 'History'), errorBox(err)); return; }
    const rows = page.records.map((r) => ({attrs: {dataset: {commit: r.commit}}, cells: [
      [fmtTime(r.at), h('div', {class: 'muted'}, ago(r.at))],
      causeText(r.cause),
      r.deleted ? h('span', {class: 'badge'}, 'deleted') : {v: r.version || '—', cls: 'num'},
      r.deleted ? h('span', {class: 'empty'}, 'no value') : show(valueFromEnvelope(r), {compact: true}),
      {v: [
        h('a', {class: 'button small', href: route('browse', ns, type, id, state) + '?asOf=' + r.commit, 'aria-label': `View ${state} as of commit ${r.commit}`}, 'View'),
        h('a', {class: 'button small', href: route('browse', ns, type, id) + '?asOf=' + r.commit, 'aria-label': `View the address as of commit ${r.commit}`}, 'Address then'),
      ], cls: 'actions'},
    ]}));
    replace(box, h('h2', {id: 'history-h'}, 'History'),
      table('', ['When', 'Changed by', ['Version', 'num'], 'Value after', ['', 'actions']], rows, {label: 'History of ' + state, empty: 'No change of this entry is in the history.'}),
      h('div', {class: 'toolbar'},
        after ? h('a', {class: 'button', href: route('browse', ns, type, id, state)}, 'Newest') : null,
        page.next ? h('a', {class: 'button', href: route('browse', ns, type, id, state) + '?after=' + page.next}, 'Older changes') : null));
  })();
  return box;
}

// asOfPanel shows the value the entry held at a commit, and a restore.
function asOfPanel(ctx, ns, type, id, state, asOf, cur) {
  const path = addrPath(ns, type, id);
  const statePath = '/state/' + path + '/' + encodeURIComponent(state);
  const box = h('section', {class: 'panel', 'aria-labelledby': 'asof-h', dataset: {asof: asOf}}, h('h2', {id: 'asof-h'}, 'As of commit ', h('code', null, asOf)));
  (async () => {
    let then = null;
    try {
      then = valueFromEnvelope((await request(statePath + '?asOf=' + encodeURIComponent(asOf), {headers: {Accept: 'application/json'}})).data);
    } catch (err) {
      if (!(err instanceof ApiError && err.status === 404)) { box.append(errorBox(err)); return; }
    }
    box.append(h('div', {id: 'asof-value'}, show(then)),
      h('h3', null, 'Then → now'), showDiff(editText(then), editText(cur.value), ['then', 'current']),
      h('div', {class: 'toolbar'},
        writeButton('Restore this value', {class: 'primary'}, async () => {
          const ok = await confirmWrite({title: `Restore ${state} to commit ${asOf}?`, text: 'Written as one mutation in the address\'s mailbox order; revertible from the audit log.',
            extra: showDiff(editText(cur.value), editText(then), ['current', 'restored']), confirmLabel: 'Restore'});
          if (!ok) return;
          try { showReceipt(`Restored ${state}`, (await request(statePath + '?asOf=' + encodeURIComponent(asOf), {method: 'POST', headers: reasonHeaders(ok.reason)})).data); location.hash = route('browse', ns, type, id, state); } catch (err) { notify('error', 'Restore failed', err.message); }
        }),
        h('a', {class: 'button', href: route('browse', ns, type, id, state)}, 'Close')));
  })();
  return box;
}
