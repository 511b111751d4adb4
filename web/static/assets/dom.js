// Small DOM and formatting helpers shared by the console and the demo.
// Text is always set with textContent: nothing from the network becomes HTML.

/**
 * Creates an element: h('div', {class: 'x', dataset: {id: 1}, onclick}, child, 'text').
 * @param {string} tag
 * @param {Record<string, any>|null} [attrs]
 * @param {...(Node|string|number|null|undefined|false)} children
 */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs ?? {})) {
    if (v == null || v === false) continue;
    if (k === 'class') el.className = v;
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'text') el.textContent = v;
    else if (k === 'style') el.style.cssText = String(v); // CSSOM: allowed by the pages' CSP (no inline style attributes)
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c == null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : String(c));
  }
}

/** Creates an SVG element with attributes. */
export function svg(tag, attrs = {}) {
  const el = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  return el;
}

/** Replaces the children of el. */
export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
}

/** "850 ms", "2.4 s", "3 min 5 s", "2 h 4 min". */
export function duration(ms) {
  if (!Number.isFinite(ms)) return '–';
  if (ms < 1000) return `${Math.max(0, Math.round(ms))} ms`;
  const s = ms / 1000;
  if (s < 10) return `${s.toFixed(1)} s`;
  if (s < 60) return `${Math.round(s)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${Math.floor(s % 60)} s`;
  const hours = Math.floor(m / 60);
  if (hours < 48) return `${hours} h ${m % 60} min`;
  return `${Math.floor(hours / 24)} d ${hours % 24} h`;
}

/** "just now", "5 s ago", "3 min ago". */
export function ago(ms) {
  if (ms < 1500) return 'just now';
  return `${duration(ms).replace(/\.\d/, '')} ago`;
}

/** Local time of a Unix ms timestamp, "14:03:07". */
export function clock(ts) {
  return new Date(ts).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', second: '2-digit', hourCycle: 'h23' });
}

/** Local time of a Unix ms timestamp without seconds, "14:03". */
export function hhmm(ts) {
  return new Date(ts).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', hourCycle: 'h23' });
}

/** 12345 -> "12,345". */
export function num(n) {
  return Number.isFinite(n) ? n.toLocaleString('en-US') : '–';
}
