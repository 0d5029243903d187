// The live view: reads /v1/nitro/events (status and experts events) and draws the cards, the two
// charts and the expert map. Field names are those of docs/server.md ("Web page and live statistics").
import { authHeaders, checkResponse, readEvents, HttpError } from './sse.js';
import { drawExpertMap, mapCellAt } from './map.js';

const $ = (id) => document.getElementById(id);

function fmt(v, digits = 1) {
  if (v === null || v === undefined || !Number.isFinite(v)) return '–';
  if (Math.abs(v) >= 1000) return Math.round(v).toLocaleString('en-US');
  return v.toFixed(digits);
}

function pct(v) {
  return v === null || v === undefined ? '–' : `${(100 * v).toFixed(1)}%`;
}

function cssVar(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
}

/** A small line chart: series [{values: [[t, v|null]...], color}], y from 0 to yMax (or the data's max). */
function drawChart(canvas, series, { yMax = null, unit = '' } = {}) {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth, h = canvas.clientHeight;
  canvas.width = Math.round(w * dpr);
  canvas.height = Math.round(h * dpr);
  const g = canvas.getContext('2d');
  g.scale(dpr, dpr);
  g.clearRect(0, 0, w, h);
  const pts = series.flatMap((s) => s.values.filter((p) => p[1] !== null));
  g.fillStyle = cssVar('--dim');
  g.font = '10px system-ui, sans-serif';
  if (!pts.length) {
    g.fillText('no data yet: send a message', 8, h / 2);
    return;
  }
  const t0 = Math.min(...pts.map((p) => p[0])), t1 = Math.max(...pts.map((p) => p[0]));
  const top = yMax ?? Math.max(1e-9, ...pts.map((p) => p[1])) * 1.1;
  const pad = 4, left = 30;
  const x = (t) => left + (t1 > t0 ? (t - t0) / (t1 - t0) : 1) * (w - left - pad);
  const y = (v) => h - pad - (v / top) * (h - 2 * pad);
  g.strokeStyle = cssVar('--line');
  g.beginPath();
  g.moveTo(left, y(0)); g.lineTo(w - pad, y(0));
  g.stroke();
  g.fillText(`${fmt(top, top < 10 ? 1 : 0)}${unit}`, 0, pad + 8);
  g.fillText(`0${unit}`, 0, h - pad);
  for (const s of series) {
    g.strokeStyle = s.color;
    g.fillStyle = s.color;
    g.lineWidth = 1.5;
    g.beginPath();
    let open = false;
    for (const [t, v] of s.values) {
      if (v === null) { open = false; continue; }
      if (!open) g.moveTo(x(t), y(v)); else g.lineTo(x(t), y(v));
      open = true;
    }
    g.stroke();
    for (const [t, v] of s.values) if (v !== null) g.fillRect(x(t) - 1, y(v) - 1, 2, 2);
  }
}

export class LiveView {
  constructor({ onModel, onAuthError }) {
    this.onModel = onModel;
    this.onAuthError = onAuthError;
    this.status = null;
    this.experts = null;
    this.previous = null;  // the experts event before the last: cells chosen since then flash
    this.abort = null;
    const map = $('expert-map');
    map.addEventListener('mousemove', (e) => this.tip(e));
    map.addEventListener('mouseleave', () => { $('map-tip').hidden = true; });
    window.addEventListener('resize', () => this.draw());
  }

  /** Keeps one /v1/nitro/events stream open, reconnecting after errors. */
  async run() {
    let delay = 500;
    for (;;) {
      this.abort = new AbortController();
      try {
        const res = await checkResponse(await fetch('/v1/nitro/events', { headers: authHeaders(), signal: this.abort.signal }));
        this.conn('live', 'live');
        delay = 500;
        await readEvents(res, ({ event, data }) => this.on(event, JSON.parse(data)));
        this.conn('reconnecting…', 'bad');
      } catch (e) {
        if (e.name === 'AbortError') continue;  // restart (a new API key)
        if (e instanceof HttpError && e.status === 401) {
          this.conn('API key needed (Settings)', 'bad');
          this.onAuthError();
          await new Promise((r) => { this.retry = r; });  // until restart()
          continue;
        }
        this.conn(`offline: ${e.message}`, 'bad');
      }
      await new Promise((r) => setTimeout(r, delay));
      delay = Math.min(delay * 2, 5000);
    }
  }

  /** Reconnects now (after the API key changed). */
  restart() {
    this.abort?.abort();
    if (this.retry) { const r = this.retry; this.retry = null; r(); }
  }

  conn(text, cls) {
    const c = $('conn');
    c.textContent = text;
    c.className = `conn ${cls}`;
  }

  on(event, data) {
    if (event === 'status') {
      this.status = data;
      this.onModel(data.model?.id ?? '');
      this.cards();
    } else if (event === 'experts') {
      this.previous = this.experts;
      this.experts = data;
      this.draw();
    }
  }

  cards() {
    const s = this.status;
    $('model').textContent = `${s.model.id} · ${s.model.n_layer} layers · ${s.model.n_expert} experts, ` +
      `${s.model.n_expert_used} per token · ${s.engine.description}`;
    const badge = $('engine');
    badge.textContent = s.engine.mode;
    badge.className = `badge ${s.engine.mode}`;
    const last = s.last_request;
    $('c-decode').textContent = fmt(last?.decode_tok_s);
    $('c-prompt').textContent = fmt(last?.prompt_tok_s);
    $('c-ttft').textContent = fmt(last?.ttft_ms, 0);
    const kv = s.kv_cache;
    $('c-kv').textContent = pct(kv.used_fraction);
    $('c-kv-unit').textContent = `${kv.tokens_used} of ${kv.tokens_capacity} tokens (${kv.n_slots} slot${kv.n_slots === 1 ? '' : 's'})`;
    $('kv-slots').replaceChildren(...kv.slots.map((sl, i) => {
      const d = document.createElement('div');
      d.className = `slot${sl.busy ? ' busy' : ''}`;
      d.title = `slot ${i}: ${sl.n_cached} of ${kv.n_ctx} tokens${sl.busy ? ', running a request' : ''}`;
      const fill = document.createElement('div');
      fill.style.width = `${Math.min(100, (100 * sl.n_cached) / Math.max(1, kv.n_ctx))}%`;
      d.append(fill);
      return d;
    }));
    $('c-queue').textContent = `${s.requests.active} / ${s.requests.queued}`;
    const x = s.experts;
    $('c-hit').textContent = x.hit_rate === null ? 'n/a' : pct(x.hit_rate);
    $('c-hit-unit').textContent = x.cache ? `${x.hits.toLocaleString('en-US')} hits, ${x.misses.toLocaleString('en-US')} misses`
      : s.engine.mode === 'gpu' ? 'every expert is in VRAM' : 'no VRAM cache: every expert on the CPU';
    const all = x.gpu_pairs + x.cpu_pairs + x.staged_pairs;
    const gpu = all ? (x.gpu_pairs + x.staged_pairs) / all : 0, cpu = all ? x.cpu_pairs / all : 0;
    $('split-gpu').style.width = `${100 * gpu}%`;
    $('split-cpu').style.width = `${100 * cpu}%`;
    $('c-split').textContent = all
      ? `GPU ${pct(gpu)} · CPU ${pct(cpu)} of ${all.toLocaleString('en-US')} expert selections (token × expert)` +
        (x.cpu_ms ? ` · CPU ${fmt(x.cpu_ms / 1000, 2)} s, GPU ${fmt(x.gpu_ms / 1000, 2)} s` : '')
      : 'no expert selections yet';
    const h = s.history;
    drawChart($('chart-tps'), [
      { values: h.map((p) => [p.t_s, p.decode_tok_s]), color: cssVar('--accent') },
      { values: h.map((p) => [p.t_s, p.prompt_tok_s]), color: cssVar('--heat') },
    ]);
    drawChart($('chart-hit'), [
      { values: h.map((p) => [p.t_s, p.hit_rate === null ? null : 100 * p.hit_rate]), color: cssVar('--hit') },
      { values: h.map((p) => [p.t_s, p.cpu_share === null ? null : 100 * p.cpu_share]), color: cssVar('--heat') },
    ], { yMax: 100, unit: '%' });
  }

  draw() {
    const x = this.experts;
    if (!x) return;
    const map = $('expert-map');
    const total = x.layers.reduce((a, l) => a + (l.selections ?? []).reduce((b, v) => b + v, 0), 0);
    map.dataset.version = String(x.version);
    map.dataset.selections = String(total);
    const note = $('map-note');
    if (!x.routing)
      note.textContent = x.mode === 'gpu'
        ? 'GPU engine with every expert in VRAM: per-expert selections are not collected (reading the router back would slow prompts).'
        : 'This engine does not report routing.';
    else
      note.textContent = `Rows: layers; columns: experts. Brightness: selections in about the last ${x.half_life_tokens} tokens ` +
        `(half-life). ${total.toLocaleString('en-US')} selections since start. Cells chosen since the last update are outlined` +
        (x.cache ? ': green, a VRAM hit; red, computed on the CPU.' : ' in blue.');
    drawExpertMap(map, x, this.previous, cssVar);
  }

  tip(e) {
    const x = this.experts;
    const tip = $('map-tip');
    const cell = x && mapCellAt($('expert-map'), x, e.offsetX, e.offsetY);
    if (!cell) { tip.hidden = true; return; }
    const L = x.layers[cell.layer];
    const where = ['CPU (RAM)', 'VRAM slot (adaptive)', 'VRAM (static)'][L.home[cell.expert]] ?? '?';
    let text = `layer ${cell.layer} · expert ${cell.expert} · ${where} · ${L.selections[cell.expert]} selections, ` +
      `${L.recent[cell.expert].toFixed(1)} recent`;
    if (x.cache && L.hits + L.misses > 0) text += ` · layer hit rate ${pct(L.hits / (L.hits + L.misses))}`;
    tip.textContent = text;
    tip.hidden = false;
    tip.style.left = `${Math.min(e.offsetX + 12, $('expert-map').clientWidth - tip.offsetWidth)}px`;
    tip.style.top = `${e.offsetY + 14}px`;
  }
}
