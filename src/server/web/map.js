// The expert map: one row per layer, one cell per expert. A cell's colour says where the expert
// is computed (CPU, an adaptive VRAM slot, a static VRAM slot); its orange glow, how often the
// router chose it recently; an outline, that it was chosen since the previous update (with an
// expert cache: green, a VRAM hit; red, computed on the CPU; without one: blue).

const LEFT = 34, TOP = 16, RIGHT_CACHE = 64;
const geometry = new WeakMap();

function rowHeight(nLayer) {
  return nLayer <= 16 ? 16 : nLayer <= 40 ? 11 : nLayer <= 64 ? 8 : 6;
}

/** Draws `x` (an experts event) on `canvas`; `prev` is the event before (or null). */
export function drawExpertMap(canvas, x, prev, cssVar) {
  const nL = x.layers.length, nX = x.n_expert;
  const rh = rowHeight(nL);
  const right = x.cache ? RIGHT_CACHE : 6;
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth;
  const h = TOP + nL * rh + 4;
  canvas.style.height = `${h}px`;
  canvas.width = Math.round(w * dpr);
  canvas.height = Math.round(h * dpr);
  const g = canvas.getContext('2d');
  g.scale(dpr, dpr);
  g.clearRect(0, 0, w, h);
  const cw = Math.max(0.5, (w - LEFT - right) / Math.max(1, nX));
  geometry.set(canvas, { cw, rh, nL, nX });
  const colors = [cssVar('--cpu'), cssVar('--slot'), cssVar('--static')];
  const heat = cssVar('--heat'), hit = cssVar('--hit'), miss = cssVar('--miss'), dim = cssVar('--dim'), chosen = cssVar('--accent');
  g.font = '10px system-ui, sans-serif';
  g.fillStyle = dim;
  // expert axis: a tick label every power-of-two-ish step that fits
  const step = [1, 2, 4, 8, 16, 32, 64, 128, 256].find((s) => s * cw >= 26) ?? 512;
  for (let e = 0; e < nX; e += step) g.fillText(String(e), LEFT + e * cw, TOP - 4);
  const gap = cw >= 4 ? 1 : 0;
  for (let il = 0; il < nL; ++il) {
    const L = x.layers[il];
    const y = TOP + il * rh;
    if (il % Math.max(1, Math.ceil(10 / rh)) === 0) {
      g.fillStyle = dim;
      g.fillText(String(il), 4, y + rh - 2);
    }
    if (!L.moe) continue;
    const P = prev?.layers?.[il];
    const maxRecent = Math.max(1e-9, ...L.recent);
    for (let e = 0; e < nX; ++e) {
      const x0 = LEFT + e * cw;
      g.fillStyle = colors[L.home[e]] ?? colors[0];
      g.globalAlpha = 1;
      g.fillRect(x0, y, cw - gap, rh - 1);
      const r = L.recent[e] / maxRecent;
      if (r > 0.005) {
        g.globalAlpha = Math.min(1, 0.12 + 0.88 * r);
        g.fillStyle = heat;
        g.fillRect(x0, y, cw - gap, rh - 1);
        g.globalAlpha = 1;
      }
      if (P?.selections && L.selections[e] > P.selections[e]) {
        g.strokeStyle = x.cache ? (L.home[e] > 0 ? hit : miss) : chosen;
        g.lineWidth = 1;
        if (cw >= 3) g.strokeRect(x0 + 0.5, y + 0.5, cw - gap - 1, rh - 2);
        else { g.fillStyle = g.strokeStyle; g.fillRect(x0, y, cw, 2); }
      }
    }
    if (x.cache) {  // the layer's hit rate since start
      const looked = L.hits + L.misses;
      const bx = w - RIGHT_CACHE + 6, bw = RIGHT_CACHE - 30;
      g.fillStyle = colors[0];
      g.fillRect(bx, y + 1, bw, rh - 3);
      if (looked) {
        g.fillStyle = hit;
        g.fillRect(bx, y + 1, (bw * L.hits) / looked, rh - 3);
        g.fillStyle = dim;
        g.fillText(`${Math.round((100 * L.hits) / looked)}%`, bx + bw + 2, y + rh - 2);
      }
    }
  }
  if (x.cache) {
    g.fillStyle = dim;
    g.fillText('hit rate', w - RIGHT_CACHE + 6, TOP - 4);
  }
}

/** The {layer, expert} under a point of the canvas (CSS pixels), or null. */
export function mapCellAt(canvas, x, px, py) {
  const geo = geometry.get(canvas);
  if (!geo) return null;
  const layer = Math.floor((py - TOP) / geo.rh), expert = Math.floor((px - LEFT) / geo.cw);
  if (layer < 0 || layer >= geo.nL || expert < 0 || expert >= geo.nX) return null;
  if (!x.layers[layer]?.moe) return null;
  return { layer, expert };
}
