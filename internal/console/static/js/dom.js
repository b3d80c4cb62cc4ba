// Building the page: elements are made with h(), text always goes in as
// text nodes (never as HTML), so a state value can never become markup.

// h makes an element: h('a', {href: '#/', class: 'x'}, 'text', child, [more]).
// Attributes named on* take functions (event listeners); null and false
// attributes are left out; children may be strings, nodes, arrays or null.
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v == null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else if (v === true) el.setAttribute(k, '');
    else el.setAttribute(k, String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c == null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.appendChild(c);
    else el.appendChild(document.createTextNode(String(c)));
  }
}

// replace empties el and fills it with children.
export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

// table makes a table with a caption, header labels and rows of cells;
// a cell is a value or {v, cls}.
export function table(caption, headers, rows, opts = {}) {
  const head = h('tr', null, headers.map((x) => {
    const [label, cls] = Array.isArray(x) ? x : [x, null];
    // A column of buttons has no visible heading; screen readers get one.
    return h('th', {scope: 'col', class: cls}, label || h('span', {class: 'sr-only'}, 'Actions'));
  }));
  const body = rows.length
    ? rows.map((r) => h('tr', r.attrs || null, r.cells.map((c) =>
      c && typeof c === 'object' && !(c instanceof Node) && !Array.isArray(c) ? h('td', {class: c.cls}, c.v) : h('td', null, c))))
    : [h('tr', null, h('td', {colspan: headers.length, class: 'empty'}, opts.empty || 'Nothing here.'))];
  return h('div', {class: 'table-wrap'}, h('table', {'aria-label': opts.label || caption},
    caption ? h('caption', null, caption) : null, h('thead', null, head), h('tbody', null, body)));
}

// fmtTime renders an RFC 3339 time in the browser's zone, with seconds.
export function fmtTime(t) {
  if (!t) return '—';
  const d = new Date(t);
  if (isNaN(d)) return String(t);
  const pad = (n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

// ago renders how long before now a time was.
export function ago(t) {
  if (!t) return '';
  const s = Math.round((Date.now() - new Date(t).getTime()) / 1000);
  if (s < 0) return 'in ' + dur(-s);
  return dur(s) + ' ago';
}

function dur(s) {
  if (s < 60) return s + 's';
  if (s < 3600) return Math.floor(s / 60) + 'm ' + (s % 60) + 's';
  if (s < 86400) return Math.floor(s / 3600) + 'h ' + Math.floor((s % 3600) / 60) + 'm';
  return Math.floor(s / 86400) + 'd ' + Math.floor((s % 86400) / 3600) + 'h';
}

// fmtBytes renders a byte count.
export function fmtBytes(n) {
  if (n == null) return '—';
  if (n < 1024) return n + ' B';
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  let v = n / 1024;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return v.toFixed(v < 10 ? 1 : 0) + ' ' + units[i];
}

// fmtNum renders an integer with grouping.
export function fmtNum(n) {
  return n == null ? '—' : Number(n).toLocaleString('en-US');
}

// addrPath is the API path of an address (every segment encoded).
export function addrPath(ns, type, id) {
  return [ns, type, id].filter((x) => x != null).map(encodeURIComponent).join('/');
}

// route builds a console hash route from segments (each encoded).
export function route(...segs) {
  return '#/' + segs.map(encodeURIComponent).join('/');
}
