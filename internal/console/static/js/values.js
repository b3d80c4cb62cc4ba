// State values: how the console shows them (typed), the text an operator
// edits, and the line diff shown before a write.

import {h} from './dom.js';

const T = 'io.statefun.types/';
export const SCALARS = {
  [T + 'bool']: 'bool', [T + 'int']: 'int', [T + 'long']: 'long',
  [T + 'float']: 'float', [T + 'double']: 'double', [T + 'string']: 'string',
};

// kindOf says how a value of typename is shown and edited: a scalar kind,
// 'json' (the value's bytes are JSON), or 'bytes'.
export function kindOf(typename, jsonValue) {
  if (SCALARS[typename]) return SCALARS[typename];
  return jsonValue !== undefined ? 'json' : 'bytes';
}

// Value is one value as the console holds it: typename, kind, the exact
// stored bytes (base64) and the text form shown and edited.
export function valueFromEnvelope(env) {
  const kind = kindOf(env.typename, env.value);
  return {typename: env.typename, kind, base64: env.valueBase64 || '', text: textOf(kind, env.value, env.valueBase64)};
}

// valueFromBytes builds a Value from stored bytes alone (an audit
// before-image): built-in scalars are decoded, JSON is recognised.
export function valueFromBytes(typename, base64) {
  const bytes = b64ToBytes(base64 || '');
  if (SCALARS[typename]) {
    const kind = SCALARS[typename];
    return {typename, kind, base64, text: decodeScalar(kind, bytes)};
  }
  try {
    const s = new TextDecoder('utf-8', {fatal: true}).decode(bytes);
    JSON.parse(s);
    return {typename, kind: 'json', base64, text: pretty(s)};
  } catch {
    return {typename, kind: 'bytes', base64, text: base64};
  }
}

function textOf(kind, value, base64) {
  switch (kind) {
    case 'json': return pretty(new TextDecoder().decode(b64ToBytes(base64 || '')));
    case 'bytes': return base64 || '';
    case 'string': return value == null ? '' : String(value);
    default: return value == null ? '' : String(value);
  }
}

// pretty indents JSON text, keeping every number's exact text where the
// browser can (JSON.rawJSON), so a large integer is not rounded.
export function pretty(jsonText) {
  try { return JSON.stringify(JSON.parse(jsonText, keepNumbers), null, 2); } catch { return jsonText; }
}

function keepNumbers(key, value, ctx) {
  if (typeof value === 'number' && ctx && typeof ctx.source === 'string' && typeof JSON.rawJSON === 'function') {
    return JSON.rawJSON(ctx.source);
  }
  return value;
}

export function b64ToBytes(b64) {
  const bin = atob(b64);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

export function bytesToB64(bytes) {
  let s = '';
  for (const b of bytes) s += String.fromCharCode(b);
  return btoa(s);
}

export function bytesToHex(bytes) {
  return Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join(' ');
}

// decodeScalar reads the protobuf wrapper of a built-in type (field 1;
// absent means the default value).
function decodeScalar(kind, b) {
  const dv = new DataView(b.buffer, b.byteOffset, b.byteLength);
  let i = 0;
  while (i < b.length) {
    const tag = b[i++];
    const field = tag >> 3, wire = tag & 7;
    if (wire === 0) {
      let x = 0n, shift = 0n;
      while (i < b.length) { const c = b[i++]; x |= BigInt(c & 0x7f) << shift; shift += 7n; if (!(c & 0x80)) break; }
      if (field === 1 && kind === 'bool') return x ? 'true' : 'false';
    } else if (wire === 5) {
      if (field === 1 && kind === 'int') return String(dv.getInt32(i, true));
      if (field === 1 && kind === 'float') return String(dv.getFloat32(i, true));
      i += 4;
    } else if (wire === 1) {
      if (field === 1 && kind === 'long') return String(dv.getBigInt64(i, true));
      if (field === 1 && kind === 'double') return String(dv.getFloat64(i, true));
      i += 8;
    } else if (wire === 2) {
      let n = 0, shift = 0;
      while (i < b.length) { const c = b[i++]; n |= (c & 0x7f) << shift; shift += 7; if (!(c & 0x80)) break; }
      if (field === 1 && kind === 'string') return new TextDecoder().decode(b.subarray(i, i + n));
      i += n;
    } else {
      break;
    }
  }
  return {bool: 'false', string: ''}[kind] ?? '0';
}

// show renders a value, typed: scalars as text, JSON pretty, bytes as hex
// and base64 with their length. A null value is "no value".
export function show(v, opts = {}) {
  if (!v) return h('span', {class: 'empty'}, 'no value');
  switch (v.kind) {
    case 'bool':
      return h('span', {class: 'badge ' + (v.text === 'true' ? 'ok' : '')}, v.text);
    case 'int': case 'long': case 'float': case 'double':
      return h('code', {class: 'mono'}, v.text);
    case 'string':
      return h('div', {class: 'value'}, h('pre', null, v.text === '' ? h('span', {class: 'empty'}, 'empty string') : v.text));
    case 'json':
      return h('div', {class: 'value'}, h('pre', null, opts.compact ? compactJSON(v.text) : v.text));
    default: {
      const bytes = b64ToBytes(v.base64);
      const hex = bytesToHex(bytes.subarray(0, opts.compact ? 24 : 512));
      const more = bytes.length > (opts.compact ? 24 : 512) ? ' …' : '';
      return h('div', {class: 'value'},
        h('div', {class: 'muted'}, bytes.length + ' bytes'),
        h('pre', null, 'hex    ' + hex + more),
        opts.compact ? null : h('pre', null, 'base64 ' + v.base64));
    }
  }
}

// bytesView renders bytes as the API gives them ({length, base64, text?}):
// the text when they are UTF-8, else hex and base64; with their length.
export function bytesView(b) {
  if (b.text != null) {
    return h('div', {class: 'value'}, h('pre', null, b.text === '' ? h('span', {class: 'empty'}, 'empty') : b.text.length > 500 ? b.text.slice(0, 500) + ' …' : b.text),
      h('div', {class: 'muted'}, b.length + ' bytes'));
  }
  return show({kind: 'bytes', base64: b.base64});
}

function compactJSON(text) {
  try { return JSON.stringify(JSON.parse(text, keepNumbers)); } catch { return text; }
}

// parseEdit checks the text an operator typed for a kind and returns the
// request body and content type of the PUT, or throws with what is wrong.
export function parseEdit(kind, text, bytesFormat) {
  switch (kind) {
    case 'bool':
      if (text !== 'true' && text !== 'false') throw new Error('A bool is true or false.');
      return {body: text, contentType: 'text/plain; charset=utf-8'};
    case 'int': case 'long':
      if (!/^-?\d+$/.test(text.trim())) throw new Error('An ' + kind + ' is a whole number, like 42 or -7.');
      return {body: text.trim(), contentType: 'text/plain; charset=utf-8'};
    case 'float': case 'double':
      if (text.trim() === '' || isNaN(Number(text.trim())) && !/^(NaN|[+-]?Inf(inity)?)$/i.test(text.trim())) throw new Error('A ' + kind + ' is a number, like 3.5.');
      return {body: text.trim(), contentType: 'text/plain; charset=utf-8'};
    case 'string':
      return {body: text, contentType: 'text/plain; charset=utf-8'};
    case 'json':
      try { JSON.parse(text); } catch (e) { throw new Error('Not valid JSON: ' + e.message); }
      return {body: text, contentType: 'text/plain; charset=utf-8'};
    default: {
      const bytes = bytesFormat === 'hex' ? hexToBytes(text) : b64ToBytesChecked(text);
      return {body: bytes, contentType: 'application/octet-stream'};
    }
  }
}

function hexToBytes(text) {
  const s = text.replace(/\s+/g, '');
  if (s.length % 2 || /[^0-9a-fA-F]/.test(s)) throw new Error('Hex is pairs of 0-9 and a-f.');
  const out = new Uint8Array(s.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(s.substr(i * 2, 2), 16);
  return out;
}

function b64ToBytesChecked(text) {
  const s = text.replace(/\s+/g, '');
  try { return b64ToBytes(s); } catch { throw new Error('Not valid base64.'); }
}

// editText is the text a value is edited as (bytes in the given format).
export function editText(v, bytesFormat) {
  if (!v) return '';
  if (v.kind === 'bytes') return bytesFormat === 'hex' ? bytesToHex(b64ToBytes(v.base64)) : v.base64;
  return v.text;
}

// diffLines is a line diff of a and b (longest common subsequence):
// [{op: ' ' | '-' | '+', line}].
export function diffLines(a, b) {
  const x = a === '' ? [] : a.split('\n');
  const y = b === '' ? [] : b.split('\n');
  const n = x.length, m = y.length;
  if (n * m > 4e6) { // too large to align: all out, all in
    return [...x.map((line) => ({op: '-', line})), ...y.map((line) => ({op: '+', line}))];
  }
  const L = Array.from({length: n + 1}, () => new Uint32Array(m + 1));
  for (let i = n - 1; i >= 0; i--) {
    for (let j = m - 1; j >= 0; j--) {
      L[i][j] = x[i] === y[j] ? L[i + 1][j + 1] + 1 : Math.max(L[i + 1][j], L[i][j + 1]);
    }
  }
  const out = [];
  let i = 0, j = 0;
  while (i < n && j < m) {
    if (x[i] === y[j]) { out.push({op: ' ', line: x[i]}); i++; j++; }
    else if (L[i + 1][j] >= L[i][j + 1]) out.push({op: '-', line: x[i++]});
    else out.push({op: '+', line: y[j++]});
  }
  while (i < n) out.push({op: '-', line: x[i++]});
  while (j < m) out.push({op: '+', line: y[j++]});
  return out;
}

// showDiff renders a diff; each line says in words whether it is removed
// or added (not by colour alone).
export function showDiff(before, after, labels = ['current', 'new']) {
  const d = diffLines(before, after);
  const changed = d.some((l) => l.op !== ' ');
  return h('div', null,
    h('p', {class: 'muted'}, changed
      ? `Lines starting with − are in the ${labels[0]} value only, + in the ${labels[1]} value only.`
      : 'No change: the new value is the same as the current one.'),
    h('div', {class: 'diff', role: 'group', 'aria-label': `Difference between the ${labels[0]} and the ${labels[1]} value`},
      d.map((l) => h('div', {class: l.op === '-' ? 'del' : l.op === '+' ? 'ins' : 'same'},
        l.op === '-' ? h('span', {'aria-label': 'removed: '}, '− ') : l.op === '+' ? h('span', {'aria-label': 'added: '}, '+ ') : '  ',
        l.line === '' ? ' ' : l.line))));
}
