// Dead letters: the messages an operator skipped, each re-sendable as a
// new message once the function is fixed; and the records each Kafka
// ingress consumed but could not turn into a message (a null or empty key,
// a key that is not UTF-8, …), which stay readable until retention
// removes them (the API has no re-send for those: fix the producer).

import {h, replace, table, fmtTime, fmtNum, route} from './dom.js';
import {request} from './api.js';
import {errorBox, writeButton, confirmWrite, showReceipt, notify, crumbs} from './ui.js';
import {bytesView} from './values.js';

export async function deadLetters(main, ctx) {
  replace(main, h('div', {class: 'page-head'}, h('div', null, h('h1', null, 'Dead letters'),
    h('div', {class: 'muted'}, 'Messages skipped out of an inbox, and records the Kafka ingresses could not deliver.'))));
  const msgBox = h('section', {class: 'panel', 'aria-labelledby': 'skipped-h'}, h('h2', {id: 'skipped-h'}, 'Skipped messages'));
  const kafkaBox = h('section', {class: 'panel', 'aria-labelledby': 'kafka-h'}, h('h2', {id: 'kafka-h'}, 'Kafka ingresses'));
  main.append(msgBox, kafkaBox);
  await Promise.all([skipped(msgBox, ctx), ingresses(kafkaBox)]);
}

async function skipped(box, ctx) {
  const after = ctx.query.get('after');
  let page;
  try { page = (await request('/dead-letters/messages?limit=100' + (after ? '&after=' + encodeURIComponent(after) : ''))).data; } catch (err) { box.append(errorBox(err)); return; }
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
  box.append(h('p', {class: 'muted'}, 'Oldest first. Re-send one after the fix: it goes to the end of its address\'s inbox.'),
    table('', ['Skipped', 'Address', 'Type', 'Value', 'Skipped by', 'Error', ['', 'actions']], rows, {label: 'Message dead letters', empty: 'No message dead letter.'}));
  if (page.next) box.append(h('div', {class: 'toolbar'}, h('a', {class: 'button', href: '#/dead-letters?after=' + encodeURIComponent(page.next)}, 'Next page')));
}

// ingresses is the summary of GET /ingresses: per ingress, its dead
// letters counted by topic and reason, each count a link to the records.
async function ingresses(box) {
  let data;
  try { data = (await request('/ingresses')).data; } catch (err) { box.append(errorBox(err)); return; }
  const rows = data.ingresses.flatMap((in_) => {
    const [ns, name] = in_.ingress.split('/');
    return in_.counts.map((c) => ({attrs: {dataset: {ingress: in_.ingress, topic: c.topic, reason: c.reason}}, cells: [
      h('a', {href: route('dead-letters', ns, name)}, in_.ingress),
      h('code', null, c.topic),
      h('code', null, c.reason),
      {v: h('a', {href: route('dead-letters', ns, name) + '?' + new URLSearchParams({topic: c.topic, reason: c.reason}), 'aria-label': `${c.count} dead letters of ${in_.ingress}, topic ${c.topic}, ${c.reason}`}, fmtNum(c.count)), cls: 'num'},
      fmtTime(c.oldestStoredAt), fmtTime(c.newestStoredAt),
    ]}));
  });
  box.append(h('p', {class: 'muted'}, 'Records an ingress consumed but could not deliver, kept until retention removes them. Read-only here: fix the producer.'),
    table('', ['Ingress', 'Topic', 'Reason', ['Records', 'num'], 'Oldest', 'Newest'], rows, {label: 'Kafka ingress dead letters', empty: 'No Kafka ingress holds a dead letter.'}));
}

const FILTERS = ['topic', 'partition', 'reason'];

// ingressDeadLetters lists one ingress's dead letters, filtered and paged
// (GET /ingresses/<ns>/<name>/dead-letters), with each record's key and
// value as text when they are UTF-8 and as bytes otherwise.
export async function ingressDeadLetters(main, ctx, ns, name) {
  const q = ctx.query;
  const inputs = {};
  const field = (f, label, attrs = {}) => {
    inputs[f] = h('input', Object.assign({id: 'dl-' + f, name: f, type: 'text', autocomplete: 'off', value: q.get(f) || ''}, attrs));
    return h('div', {class: 'field'}, h('label', {for: 'dl-' + f}, label), inputs[f]);
  };
  const base = route('dead-letters', ns, name);
  replace(main,
    h('div', {class: 'page-head'}, h('div', null,
      crumbs({label: 'Dead letters', href: '#/dead-letters'}, {label: ns + '/' + name}),
      h('h1', null, 'Dead letters of ', h('code', null, ns + '/' + name)),
      h('div', {class: 'muted'}, 'Kafka records this ingress could not deliver, in the order they were stored.'))),
    h('section', {class: 'panel'}, h('form', {class: 'filters', role: 'search', 'aria-label': 'Filter the dead letters', onsubmit: (e) => {
      e.preventDefault();
      const p = new URLSearchParams();
      for (const f of FILTERS) if (inputs[f].value.trim()) p.set(f, inputs[f].value.trim());
      location.hash = base + (p.toString() ? '?' + p : '');
    }},
    field('topic', 'Topic', {size: 12}), field('partition', 'Partition', {size: 4, inputmode: 'numeric'}), field('reason', 'Reason', {size: 14}),
    h('button', {type: 'submit', class: 'primary'}, 'Filter'),
    h('a', {class: 'button', href: base}, 'Clear'))));
  const params = new URLSearchParams({limit: '100'});
  for (const f of [...FILTERS, 'after']) if (q.get(f)) params.set(f, q.get(f));
  let page;
  try { page = (await request('/ingresses/' + encodeURIComponent(ns) + '/' + encodeURIComponent(name) + '/dead-letters?' + params)).data; } catch (err) { main.append(errorBox(err)); return; }
  const rows = page.deadLetters.map((d) => ({attrs: {dataset: {offset: `${d.topic}/${d.partition}/${d.offset}`}}, cells: [
    fmtTime(d.storedAt),
    [h('code', null, d.topic), ' ', h('span', {class: 'muted'}, `partition ${d.partition}, offset ${d.offset}`)],
    h('code', null, d.reason),
    d.key ? bytesView(d.key) : h('span', {class: 'empty'}, 'null'),
    d.valueOmitted ? h('span', {class: 'empty'}, 'not kept (too large); the record stays in its topic') : bytesView(d.value),
    {v: fmtTime(d.timestamp), cls: 'hide-narrow'},
  ]}));
  const next = page.next ? base + '?' + new URLSearchParams(Object.assign(Object.fromEntries(q), {after: page.next})) : null;
  main.append(h('section', {class: 'panel', 'aria-labelledby': 'records-h'},
    h('h2', {id: 'records-h'}, 'Records'),
    table('', ['Stored', 'Where', 'Reason', 'Key', 'Value', ['Record time', 'hide-narrow']], rows, {label: 'Dead letters of ' + ns + '/' + name, empty: 'No dead letter matches.'}),
    h('div', {class: 'toolbar'},
      q.get('after') ? h('a', {class: 'button', href: base + '?' + new URLSearchParams(Object.fromEntries([...q].filter(([k]) => k !== 'after')))}, 'First page') : null,
      next ? h('a', {class: 'button', href: next, rel: 'next'}, 'Next page') : null)));
}
