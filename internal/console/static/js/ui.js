// Shared pieces of the console: who is signed in, notices, the confirm
// dialog every write goes through, and how receipts and errors read.

import {h, replace, fmtTime, route} from './dom.js';
import {ApiError} from './api.js';

// session is what GET /whoami said about the token of this tab.
export const session = {principal: '', scopes: [], canWrite: false, requireReason: false, tokens: false};

// notify shows a notice at the top of the page (announced to screen
// readers); kind is 'ok', 'warn' or 'error'. It stays until dismissed or
// replaced by navigation.
export function notify(kind, title, ...body) {
  const box = document.getElementById('notices');
  const n = h('div', {class: 'notice ' + kind, dataset: {notice: kind}},
    h('div', {class: 'body'}, h('div', {class: 'title'}, title), body),
    h('button', {type: 'button', class: 'small', 'aria-label': 'Dismiss notice', onclick: () => n.remove()}, 'Dismiss'));
  box.replaceChildren(n);
  return n;
}

export function clearNotices() { document.getElementById('notices').replaceChildren(); }

// showError renders a failed call in place: the status and the API's
// detail.
export function errorBox(err) {
  if (err instanceof ApiError) {
    return h('div', {class: 'notice error', role: 'alert'}, h('div', {class: 'body'},
      h('div', {class: 'title'}, `${err.status} ${err.problem.title || ''}`.trim()),
      h('div', null, err.problem.detail || err.message)));
  }
  return h('div', {class: 'notice error', role: 'alert'}, h('div', {class: 'body'}, h('div', {class: 'title'}, 'Error'), h('div', null, String(err.message || err))));
}

// receiptView renders the receipt(s) of a write: what happened, its
// mutation id (linked to the audit log), versions and commit.
export function receiptView(rc) {
  const list = Array.isArray(rc) ? rc : [rc];
  return h('div', {class: 'receipt', dataset: {receipt: list.map((r) => r.status).join(',')}}, list.map((r) =>
    h('dl', {class: 'kv'},
      h('dt', null, 'Status'), h('dd', null, h('span', {class: 'badge ' + (r.status === 'committed' || r.status === 'applied' ? 'ok' : r.status === 'rejected' ? 'failing' : 'info')}, r.status)),
      h('dt', null, 'Mutation'), h('dd', null, r.mutation ? h('a', {href: '#/audit?mutation=' + encodeURIComponent(r.mutation)}, h('code', null, r.mutation)) : '—'),
      r.version != null ? [h('dt', null, 'Version'), h('dd', null, (r.previousVersion ? r.previousVersion + ' → ' : '') + r.version)] : null,
      r.commit ? [h('dt', null, 'Commit'), h('dd', null, h('code', null, r.commit))] : null,
      r.deadLetter ? [h('dt', null, 'Dead letter'), h('dd', null, h('a', {href: '#/dead-letters'}, h('code', null, r.deadLetter)))] : null,
      r.inboxKey ? [h('dt', null, 'New message'), h('dd', null, h('code', null, r.inboxKey))] : null,
      r.reason ? [h('dt', null, 'Reason'), h('dd', null, r.reason)] : null)));
}

// showReceipt announces a write's receipt at the top of the page.
export function showReceipt(title, rc) {
  return notify('ok', title, receiptView(rc));
}

// confirmWrite opens the confirm dialog of a write: a title, what will
// happen, optional extra content (a diff), and a reason field (required
// when the runtime requires reasons). It resolves to {reason} or null.
// validate, when given, runs on submit: null lets it through, [element,
// message] keeps the dialog open with the message and focuses element.
export function confirmWrite({title, text, extra, confirmLabel = 'Confirm', danger = false, reasonPlaceholder = '', validate = null}) {
  const dlg = document.getElementById('dialog');
  return new Promise((resolve) => {
    const reasonId = 'dialog-reason';
    const reason = h('input', {id: reasonId, name: 'reason', type: 'text', autocomplete: 'off', placeholder: reasonPlaceholder,
      required: session.requireReason || null, 'aria-describedby': 'dialog-reason-hint'});
    const err = h('div', {class: 'error-text', role: 'alert'});
    let done = false;
    const finish = (v) => { if (!done) { done = true; dlg.close(); resolve(v); } };
    const form = h('form', {method: 'dialog', onsubmit: (e) => {
      e.preventDefault();
      const bad = validate ? validate() : null;
      if (bad) { err.textContent = bad[1]; bad[0].focus(); return; }
      if (session.requireReason && !reason.value.trim()) { err.textContent = 'This runtime requires a reason for every change.'; reason.focus(); return; }
      finish({reason: reason.value.trim()});
    }},
    h('h2', {id: 'dialog-title'}, title),
    text ? h('p', null, text) : null,
    extra || null,
    h('div', {class: 'field'},
      h('label', {for: reasonId}, session.requireReason ? 'Reason (required)' : 'Reason (optional)'),
      reason,
      h('div', {class: 'hint', id: 'dialog-reason-hint'}, 'Recorded in the audit log with your name, ' + (session.principal || 'anonymous') + '.')),
    err,
    h('div', {class: 'buttons'},
      h('button', {type: 'button', onclick: () => finish(null)}, 'Cancel'),
      h('button', {type: 'submit', class: danger ? 'danger primary' : 'primary', dataset: {confirm: '1'}}, confirmLabel)));
    replace(dlg, form);
    dlg.onclose = () => finish(null);
    dlg.showModal();
    // The first field of the dialog: an editor's, else the reason.
    (form.querySelector('input, select, textarea') || reason).focus();
  });
}

// crumbs renders the breadcrumb trail of a page.
export function crumbs(...items) {
  return h('nav', {class: 'crumbs', 'aria-label': 'Breadcrumb'}, items.map((it, i) => [
    i ? h('span', {class: 'sep', 'aria-hidden': 'true'}, '/') : null,
    it.href ? h('a', {href: it.href}, it.label) : h('span', {'aria-current': 'page'}, it.label)]));
}

// addressCrumbs is the trail down to an address (and a state).
export function addressCrumbs(ns, type, id, state) {
  const items = [{label: 'Browse', href: '#/browse'}, {label: ns + '/' + type, href: route('browse', ns, type)}];
  if (id != null) items.push({label: id, href: state != null ? route('browse', ns, type, id) : null});
  if (state != null) items.push({label: state});
  return crumbs(...items);
}

// writeButton makes a button that exists only for a token that may write.
export function writeButton(label, attrs, onclick) {
  if (!session.canWrite) return null;
  return h('button', Object.assign({type: 'button', onclick}, attrs || {}), label);
}

// causeText says in words who or what made a change of an entry.
export function causeText(c) {
  if (!c) return '';
  switch (c.kind) {
    case 'mutation': return `operator ${c.principal}` + (c.reason ? ` (“${c.reason}”)` : '') + (c.reverts ? `, reverting ${c.reverts}` : '');
    case 'invocation': return `the function, handling ${c.messageCount || (c.messages || []).length} message(s)`;
    case 'expiry': return 'expiry (TTL)';
    case 'before-history': return 'a write from before the runtime kept history';
    default: return c.kind;
  }
}

export {fmtTime};
