// Browse: namespaces and their function types (those the module registers
// and those that only hold state), then a type's ids, paged, with a prefix
// search.

import {h, replace, table, route, addrPath} from './dom.js';
import {request} from './api.js';
import {errorBox, crumbs, writeButton, confirmWrite, showReceipt, notify} from './ui.js';

export async function types(main) {
  replace(main, h('div', {class: 'page-head'}, h('div', null, h('h1', null, 'Browse'),
    h('div', {class: 'muted'}, 'Namespaces and function types: those the application registers, and those that still hold state.'))));
  let data;
  try { data = (await request('/state')).data; } catch (err) { main.append(errorBox(err)); return; }
  if (!data.namespaces.length) {
    main.append(h('section', {class: 'panel'}, h('p', {class: 'empty'}, 'No function type is known yet.')));
    return;
  }
  for (const ns of data.namespaces) {
    const rows = data.types.filter((t) => t.namespace === ns).map((t) => ({cells: [
      h('a', {href: route('browse', t.namespace, t.type)}, t.type),
      t.registered ? h('span', {class: 'badge ok'}, 'registered') : h('span', {class: 'badge'}, 'not deployed'),
      t.holdsState ? 'yes' : 'no',
      {v: String(t.registeredStates), cls: 'num'},
    ]}));
    main.append(h('section', {class: 'panel', 'aria-labelledby': 'ns-' + ns},
      h('h2', {id: 'ns-' + ns}, 'Namespace ', h('code', null, ns)),
      table('', ['Type', 'Status', 'Holds state', ['Registered states', 'num']], rows, {label: 'Types of namespace ' + ns})));
  }
}

export async function ids(main, ctx, ns, type) {
  const q = ctx.query;
  const prefix = q.get('prefix') || '';
  const after = q.get('after') || '';
  const input = h('input', {id: 'prefix', name: 'prefix', type: 'search', value: prefix, autocomplete: 'off', placeholder: 'e.g. user-1'});
  const typePath = addrPath(ns, type);
  const pauseBox = h('div', {class: 'toolbar'});
  replace(main,
    h('div', {class: 'page-head'},
      h('div', null, crumbs({label: 'Browse', href: '#/browse'}, {label: ns + '/' + type}),
        h('h1', null, ns + '/' + type)),
      pauseBox),
    h('section', {class: 'panel'},
      h('form', {class: 'filters', role: 'search', onsubmit: (e) => {
        e.preventDefault();
        location.hash = route('browse', ns, type) + (input.value ? '?prefix=' + encodeURIComponent(input.value) : '');
      }},
      h('div', {class: 'field'}, h('label', {for: 'prefix'}, 'Ids starting with'), input),
      h('button', {type: 'submit', class: 'primary'}, 'Search'),
      h('div', {class: 'field'}, h('label', {for: 'goto'}, 'Open an id'),
        h('input', {id: 'goto', name: 'goto', type: 'text', autocomplete: 'off', onkeydown: (e) => {
          if (e.key === 'Enter' && e.target.value) { e.preventDefault(); location.hash = route('browse', ns, type, e.target.value); }
        }})))));
  typePause(pauseBox, ns, type, ctx);

  const params = new URLSearchParams({limit: '50'});
  if (prefix) params.set('prefix', prefix);
  if (after) params.set('after', after);
  try {
    const page = (await request('/state/' + typePath + '?' + params)).data;
    const rows = page.ids.map((id) => ({cells: [h('a', {href: route('browse', ns, type, id)}, id)]}));
    const next = page.next ? route('browse', ns, type) + '?' + new URLSearchParams(Object.assign(prefix ? {prefix} : {}, {after: page.next})) : null;
    main.append(h('section', {class: 'panel', 'aria-labelledby': 'ids-h'},
      h('h2', {id: 'ids-h'}, prefix ? `Ids starting with “${prefix}”` : 'Ids holding state'),
      table('', ['Id'], rows, {label: 'Ids', empty: prefix ? 'No id with this prefix holds state.' : 'No id of this type holds state.'}),
      h('div', {class: 'toolbar'},
        after ? h('a', {class: 'button', href: route('browse', ns, type) + (prefix ? '?prefix=' + encodeURIComponent(prefix) : '')}, 'First page') : null,
        next ? h('a', {class: 'button', href: next, rel: 'next'}, 'Next page') : null)));
  } catch (err) {
    main.append(errorBox(err));
  }
}

// typePause shows whether the whole type is paused, with pause/resume.
async function typePause(box, ns, type, ctx) {
  let pause = null;
  try {
    const ps = (await request('/pauses?type=' + encodeURIComponent(ns + '/' + type))).data.pauses;
    pause = ps.find((p) => p.id == null) || null;
  } catch { /* the page still works without it */ }
  const path = addrPath(ns, type);
  replace(box,
    pause ? h('span', {class: 'badge paused'}, 'whole type paused by ' + pause.principal) : null,
    pause
      ? writeButton('Resume type', {class: 'primary'}, async () => {
        const ok = await confirmWrite({title: `Resume every address of ${ns}/${type}?`, text: 'Addresses paused on their own stay paused.', confirmLabel: 'Resume type'});
        if (!ok) return;
        try { showReceipt('Type resumed', (await request('/resume/' + path, {method: 'POST', body: {reason: ok.reason}})).data); ctx.reload(); } catch (err) { notify('error', 'Resume failed', err.message); }
      })
      : writeButton('Pause type', {class: 'danger'}, async () => {
        const ok = await confirmWrite({title: `Pause every address of ${ns}/${type}?`, text: 'Nothing of this type is invoked until it is resumed; messages keep arriving and wait.', confirmLabel: 'Pause type', danger: true});
        if (!ok) return;
        try { showReceipt('Type paused', (await request('/pause/' + path, {method: 'POST', body: {reason: ok.reason}})).data); ctx.reload(); } catch (err) { notify('error', 'Pause failed', err.message); }
      }));
}
