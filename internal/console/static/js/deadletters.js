// Message dead letters: the messages an operator skipped, each re-sendable
// as a new message once the function is fixed.

import {h, replace, table, fmtTime, route} from './dom.js';
import {request} from './api.js';
import {errorBox, writeButton, confirmWrite, showReceipt, notify} from './ui.js';

export async function deadLetters(main, ctx) {
  replace(main, h('div', {class: 'page-head'}, h('div', null, h('h1', null, 'Dead letters'),
    h('div', {class: 'muted'}, 'Messages skipped out of an inbox, oldest first. Re-send one after the fix: it goes to the end of its address\'s inbox.'))));
  const after = ctx.query.get('after');
  let page;
  try { page = (await request('/dead-letters/messages?limit=100' + (after ? '&after=' + encodeURIComponent(after) : ''))).data; } catch (err) { main.append(errorBox(err)); return; }
  const rows = page.deadLetters.map((d) => ({attrs: {dataset: {deadLetter: d.id}}, cells: [
    fmtTime(d.skippedAt),
    h('a', {href: route('browse', d.address.namespace, d.address.type, d.address.id)}, d.address.namespace + '/' + d.address.type + '/' + d.address.id),
    h('code', null, d.typename),
    d.value.text != null ? h('pre', {class: 'value'}, d.value.text.length > 200 ? d.value.text.slice(0, 200) + '…' : d.value.text) : d.value.length + ' bytes',
    [d.principal, d.reason ? h('div', {class: 'muted'}, d.reason) : null],
    d.lastError ? h('details', null, h('summary', null, `${d.attempts} attempt(s)`), h('pre', {class: 'lasterror'}, d.lastError)) : '—',
    {v: writeButton('Re-send', {class: 'small', 'aria-label': `Re-send dead letter ${d.id}`}, async () => {
      const ok = await confirmWrite({title: 'Re-send this message?', text: `It is sent again as a new message to ${d.address.namespace}/${d.address.type}/${d.address.id}, at the end of its inbox, and leaves the dead letters.`, confirmLabel: 'Re-send'});
      if (!ok) return;
      try { showReceipt('Re-sent', (await request('/dead-letters/messages/' + encodeURIComponent(d.id) + '/resend', {method: 'POST', body: {reason: ok.reason}})).data); } catch (err) { notify('error', 'Not re-sent', err.message); }
      ctx.reload();
    }), cls: 'actions'},
  ]}));
  main.append(h('section', {class: 'panel'},
    table('', ['Skipped', 'Address', 'Type', 'Value', 'Skipped by', 'Error', ['', 'actions']], rows, {label: 'Message dead letters', empty: 'No message dead letter.'}),
    page.next ? h('div', {class: 'toolbar'}, h('a', {class: 'button', href: '#/dead-letters?after=' + encodeURIComponent(page.next)}, 'Next page')) : null));
}
