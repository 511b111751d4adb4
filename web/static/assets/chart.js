// A connections-over-time chart as inline SVG: no library, no canvas.

import { h, svg } from './dom.js';

/** Length of the window the chart shows, in ms. */
export const WINDOW_MS = 5 * 60 * 1000;

/**
 * Keeps a sliding window of (time, value) samples per series.
 */
export class History {
  constructor(windowMs = WINDOW_MS) {
    this.windowMs = windowMs;
    /** @type {Map<string, Array<[number, number]>>} */
    this.series = new Map();
  }

  add(key, t, v) {
    let s = this.series.get(key);
    if (!s) this.series.set(key, (s = []));
    if (s.length && t <= s[s.length - 1][0]) return; // not newer than what the series has
    s.push([t, v]);
    const cut = t - this.windowMs - 5000;
    while (s.length && s[0][0] < cut) s.shift();
  }

  get(key) { return this.series.get(key) ?? []; }

  /** Forgets series not updated for a whole window. */
  prune(now) {
    for (const [k, s] of this.series) {
      if (!s.length || s[s.length - 1][0] < now - this.windowMs) this.series.delete(k);
    }
  }
}

/**
 * A chart element bound to one series; call update() with the samples.
 */
export class Sparkline {
  constructor(label = 'Connections over the last 5 minutes') {
    this.W = 300;
    this.H = 60;
    this.grid = svg('line', { class: 'grid', x1: 0, x2: this.W, y1: 0, y2: 0 });
    this.area = svg('path', { class: 'area' });
    this.line = svg('polyline', { class: 'line' });
    const root = svg('svg', { viewBox: `0 0 ${this.W} ${this.H}`, preserveAspectRatio: 'none', 'aria-hidden': 'true' });
    root.append(this.grid, this.area, this.line);
    this.ymax = h('span', { class: 'ymax' });
    this.xlbl = h('span', { class: 'xlbl' });
    this.el = h('div', { class: 'chart', role: 'img', 'aria-label': label }, root, this.ymax, this.xlbl);
    this.el.dataset.samples = '0';
  }

  /**
   * @param {Array<[number, number]>} samples
   * @param {number} now
   * @param {number} [end] last time the series is known (a node that left)
   */
  update(samples, now, end = now) {
    const { W, H } = this;
    // While the history is shorter than the window, stretch it over the
    // whole width instead of drawing a sliver at the right edge.
    const first = samples.length ? samples[0][0] : now;
    const span = Math.min(WINDOW_MS, Math.max(10 * 1000, now - first));
    const t0 = now - span;
    const pts = samples.filter(([t]) => t >= t0 - 2000);
    this.el.dataset.samples = String(pts.length);
    this.xlbl.textContent = span >= WINDOW_MS ? 'last 5 min' : `last ${span >= 90 * 1000 ? `${Math.round(span / 60000)} min` : `${Math.round(span / 1000)} s`}`;
    let max = 0;
    for (const [, v] of pts) max = Math.max(max, v);
    const top = niceCeil(Math.max(max, 1));
    const padTop = 14; // room for the y label
    const x = (t) => ((t - t0) / span) * W;
    const y = (v) => H - 2 - (v / top) * (H - padTop - 2);
    this.grid.setAttribute('y1', String(y(top)));
    this.grid.setAttribute('y2', String(y(top)));
    this.ymax.textContent = `max ${top}`;
    if (pts.length === 0) {
      this.line.setAttribute('points', '');
      this.area.setAttribute('d', '');
      return;
    }
    // A step line: the count holds until the next sample.
    const coords = [];
    let prev = null;
    for (const [t, v] of pts) {
      const px = Math.max(0, x(t));
      if (prev !== null) coords.push([px, y(prev)]);
      coords.push([px, y(v)]);
      prev = v;
    }
    coords.push([x(end), y(prev)]);
    this.line.setAttribute('points', coords.map(([a, b]) => `${a.toFixed(1)},${b.toFixed(1)}`).join(' '));
    const left = coords[0][0].toFixed(1);
    const last = coords[coords.length - 1][0].toFixed(1);
    this.area.setAttribute('d', `M${left},${H} L${coords.map(([a, b]) => `${a.toFixed(1)},${b.toFixed(1)}`).join(' L')} L${last},${H} Z`);
  }
}

/** 1, 2, 5, 10, 20, 50, ... at or above v. */
function niceCeil(v) {
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}
