// The web page's files and the live-statistics endpoints (/v1/nitro/status, /experts, /events):
// shapes, values after a request against independent references (the fixture's shape from
// shared/fixtures/README.md, the request's usage, the routing trace the same server wrote with
// --trace, read back with `nitro trace export`), the event stream's update after a request, the
// bound on open streams, and the API key.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startServer, GPTOSS, NITRO, API_KEY } from './helpers.mjs';

// shared/fixtures/README.md: tiny-gptoss-mxfp4 has 4 layers, 16 experts, 4 used per token.
const SHAPE = { n_layer: 4, n_expert: 16, n_expert_used: 4 };
const USER = [{ role: 'user', content: 'Write a haiku about experts.' }];

async function getJson(baseURL, path, headers = {}) {
  const res = await fetch(`${baseURL}${path}`, { headers });
  assert.equal(res.status, 200, `${path}: ${res.status} ${await res.clone().text()}`);
  assert.match(res.headers.get('content-type'), /^application\/json/);
  return res.json();
}

async function chat(baseURL, body, headers = {}) {
  const res = await fetch(`${baseURL}/v1/chat/completions`, {
    method: 'POST', headers: { 'Content-Type': 'application/json', ...headers }, body: JSON.stringify(body),
  });
  assert.equal(res.status, 200, await res.clone().text());
  return res.json();
}

/** Reads SSE events from a fetch response: next() resolves with {event, data} (data parsed). */
function eventReader(res) {
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buf = '';
  return {
    async next(timeoutMs = 10000) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const cut = buf.indexOf('\n\n');
        if (cut >= 0) {
          const block = buf.slice(0, cut);
          buf = buf.slice(cut + 2);
          if (block.startsWith(':')) continue;
          const event = /^event: (.*)$/m.exec(block)?.[1] ?? 'message';
          const data = /^data: (.*)$/m.exec(block)?.[1];
          return { event, data: JSON.parse(data) };
        }
        const left = deadline - Date.now();
        assert.ok(left > 0, 'no event in time');
        const chunk = await Promise.race([reader.read(), new Promise((_, rej) => setTimeout(() => rej(new Error('no event in time')), left))]);
        if (chunk.done) throw new Error('the event stream ended');
        buf += decoder.decode(chunk.value, { stream: true });
      }
    },
    cancel: () => reader.cancel(),
  };
}

test('status and experts: shapes before a request, and values after one equal the request and the routing trace', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'nitro-live-'));
  const trace = join(dir, 'routing.nmtr');
  const srv = await startServer(GPTOSS, ['--trace', trace, '-c', '256']);
  try {
    const s0 = await getJson(srv.baseURL, '/v1/nitro/status');
    assert.equal(s0.object, 'nitro.status');
    assert.equal(s0.engine.mode, 'cpu');
    assert.match(s0.engine.description, /^cpu /);
    assert.deepEqual({ n_layer: s0.model.n_layer, n_expert: s0.model.n_expert, n_expert_used: s0.model.n_expert_used }, SHAPE);
    assert.equal(s0.model.id, 'tiny-gptoss-mxfp4');
    assert.deepEqual(s0.requests, { queued: 0, active: 0, finished: 0 });
    assert.equal(s0.kv_cache.n_ctx, 256);
    assert.equal(s0.kv_cache.n_slots, 1);
    assert.equal(s0.kv_cache.tokens_used, 0);
    assert.deepEqual(s0.kv_cache.slots, [{ busy: false, n_cached: 0 }]);
    assert.equal(s0.experts.routing, true);
    assert.equal(s0.experts.cache, false);
    assert.equal(s0.experts.selections, 0);
    assert.equal(s0.experts.hit_rate, null);
    assert.equal(s0.last_request, null);
    assert.deepEqual(s0.history, []);

    const e0 = await getJson(srv.baseURL, '/v1/nitro/experts');
    assert.equal(e0.object, 'nitro.experts');
    assert.equal(e0.mode, 'cpu');
    assert.equal(e0.layers.length, SHAPE.n_layer);
    for (const L of e0.layers) {
      assert.equal(L.moe, true);
      assert.deepEqual(L.selections, new Array(SHAPE.n_expert).fill(0));
      assert.deepEqual(L.recent, new Array(SHAPE.n_expert).fill(0));
      assert.deepEqual(L.home, new Array(SHAPE.n_expert).fill(0), 'the CPU engine computes every expert on the CPU');
    }

    const r = await chat(srv.baseURL, { messages: USER, max_tokens: 12, temperature: 0 });
    const { prompt_tokens: np, completion_tokens: nc } = r.usage;
    // Every prompt token and every generated token but the last is evaluated, once per layer.
    const evaluated = np + nc - 1;

    // The snapshot is published before the response is sent: no waiting.
    const s1 = await getJson(srv.baseURL, '/v1/nitro/status');
    assert.equal(s1.requests.finished, 1);
    assert.equal(s1.tokens.prompt, np);
    assert.equal(s1.tokens.decode, nc - 1);
    assert.equal(s1.kv_cache.tokens_used, evaluated);
    assert.equal(s1.experts.selections, evaluated * SHAPE.n_layer * SHAPE.n_expert_used);
    assert.equal(s1.experts.cpu_pairs, s1.experts.selections);
    assert.equal(s1.experts.gpu_pairs, 0);
    assert.equal(s1.experts.cpu_share, 1);
    assert.equal(s1.last_request.prompt_tokens, np);
    assert.equal(s1.last_request.completion_tokens, nc);
    assert.equal(s1.last_request.finish, r.choices[0].finish_reason === 'length' ? 'length' : 'stop');
    assert.ok(s1.last_request.ttft_ms > 0);
    assert.ok(s1.last_request.prompt_tok_s > 0);
    assert.ok(s1.history.length >= 1);
    assert.ok(s1.history.at(-1).prompt_tok_s > 0);

    const e1 = await getJson(srv.baseURL, '/v1/nitro/experts');
    assert.ok(e1.version > e0.version);
    for (const L of e1.layers) {
      assert.equal(L.selections.reduce((a, b) => a + b, 0), evaluated * SHAPE.n_expert_used, `layer ${L.layer}`);
      assert.equal(L.cpu_pairs, evaluated * SHAPE.n_expert_used);
      // recent: the same selections, decayed by at most the request's tokens
      for (let e = 0; e < SHAPE.n_expert; ++e) {
        assert.ok(L.recent[e] <= L.selections[e] + 0.01 && L.recent[e] >= L.selections[e] * 2 ** (-evaluated / e1.half_life_tokens) - 0.01,
          `layer ${L.layer} expert ${e}: recent ${L.recent[e]} vs ${L.selections[e]} selections`);
      }
    }
    await srv.stop();

    // The independent reference: the routing trace of the same request, written by the trace writer.
    const lines = execFileSync(NITRO, ['trace', 'export', trace, '-o', '-']).toString().trim().split('\n').map((l) => JSON.parse(l));
    assert.equal(lines.length, evaluated * SHAPE.n_layer);
    const counts = Array.from({ length: SHAPE.n_layer }, () => new Array(SHAPE.n_expert).fill(0));
    for (const l of lines) for (const e of l.experts) counts[l.layer][e]++;
    assert.deepEqual(e1.layers.map((L) => L.selections), counts);
  } finally {
    await srv.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('the event stream sends status and experts at once, and again after a request', async () => {
  const srv = await startServer(GPTOSS);
  const ac = new AbortController();
  try {
    const res = await fetch(`${srv.baseURL}/v1/nitro/events`, { signal: ac.signal });
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type'), /^text\/event-stream/);
    const events = eventReader(res);
    const first = await events.next();
    assert.equal(first.event, 'status');
    assert.equal(first.data.object, 'nitro.status');
    const firstExperts = await events.next();
    assert.equal(firstExperts.event, 'experts');
    const before = firstExperts.data.layers.map((L) => L.selections.reduce((a, b) => a + b, 0));
    assert.deepEqual(before, [0, 0, 0, 0]);

    const r = await chat(srv.baseURL, { messages: USER, max_tokens: 6, temperature: 0 });
    const evaluated = r.usage.prompt_tokens + r.usage.completion_tokens - 1;
    let finished = null, experts = null;
    while (!finished || !experts) {
      const ev = await events.next();
      if (ev.event === 'status' && ev.data.requests.finished === 1) finished = ev.data;
      if (ev.event === 'experts' && ev.data.layers[0].selections.reduce((a, b) => a + b, 0) === evaluated * SHAPE.n_expert_used) experts = ev.data;
    }
    assert.equal(finished.last_request.completion_tokens, r.usage.completion_tokens);
    assert.ok(experts.version > firstExperts.data.version);
    events.cancel();
  } finally {
    ac.abort();
    await srv.stop();
  }
});

test('at most 16 event streams are open at once; a closed one frees its place', async () => {
  const srv = await startServer(GPTOSS);
  const streams = [];
  try {
    for (let i = 0; i < 16; ++i) {
      const ac = new AbortController();
      const res = await fetch(`${srv.baseURL}/v1/nitro/events`, { signal: ac.signal });
      assert.equal(res.status, 200, `stream ${i}`);
      const ev = eventReader(res);
      await ev.next();  // it really streams
      streams.push({ ac, ev });
    }
    const over = await fetch(`${srv.baseURL}/v1/nitro/events`);
    assert.equal(over.status, 503);
    const body = await over.json();
    assert.equal(body.error.code, 'too_many_event_streams');
    assert.match(body.error.message, /at most 16/);
    // The server still answers everything else.
    assert.equal((await fetch(`${srv.baseURL}/v1/nitro/status`)).status, 200);
    const gone = streams.pop();
    gone.ev.cancel().catch(() => {});
    gone.ac.abort();
    let status = 0;
    for (let i = 0; i < 50 && status !== 200; ++i) {
      await new Promise((r) => setTimeout(r, 100));
      const res = await fetch(`${srv.baseURL}/v1/nitro/events`);
      status = res.status;
      await res.body.cancel();
    }
    assert.equal(status, 200, 'a place is free again once a stream is closed');
  } finally {
    for (const s of streams) s.ac.abort();
    await srv.stop();
  }
});

test('the page is public; the live endpoints obey the API key', async () => {
  const srv = await startServer(GPTOSS, ['--api-key', API_KEY]);
  try {
    for (const path of ['/v1/nitro/status', '/v1/nitro/experts', '/v1/nitro/events']) {
      const none = await fetch(`${srv.baseURL}${path}`);
      assert.equal(none.status, 401, path);
      assert.equal((await none.json()).error.code, 'invalid_api_key');
      const wrong = await fetch(`${srv.baseURL}${path}`, { headers: { Authorization: 'Bearer nope' } });
      assert.equal(wrong.status, 401, path);
      await wrong.body.cancel();
      const ok = await fetch(`${srv.baseURL}${path}`, { headers: { Authorization: `Bearer ${API_KEY}` } });
      assert.equal(ok.status, 200, path);
      await ok.body.cancel();
    }
    const page = await fetch(`${srv.baseURL}/`);
    assert.equal(page.status, 200);
    assert.match(page.headers.get('content-type'), /^text\/html/);
    assert.match(await page.text(), /<title>nitro serve<\/title>/);
  } finally {
    await srv.stop();
  }
});

test('the page and its files: embedded, same-origin only, revalidated by ETag', async () => {
  const srv = await startServer(GPTOSS);
  try {
    const page = await fetch(`${srv.baseURL}/`);
    assert.equal(page.status, 200);
    const csp = page.headers.get('content-security-policy');
    assert.match(csp, /default-src 'none'/);
    assert.match(csp, /script-src 'self'/);
    assert.match(csp, /connect-src 'self'/);
    const html = await page.text();
    // Every file the page names is served, and no file names another origin.
    const refs = [...html.matchAll(/(?:src|href)="([^"]+)"/g)].map((m) => m[1]);
    assert.ok(refs.includes('/web/app.js') && refs.includes('/web/style.css'), refs.join(' '));
    const files = new Set(refs);
    for (const js of ['/web/app.js', '/web/chat.js', '/web/live.js', '/web/map.js', '/web/sse.js']) files.add(js);
    for (const f of files) {
      const res = await fetch(`${srv.baseURL}${f}`);
      assert.equal(res.status, 200, f);
      const text = await res.text();
      assert.doesNotMatch(text, /(?:src|href|url)\s*[=(]\s*["']?(?:https?:)?\/\//i, `${f} names another origin`);
      if (f.endsWith('.js')) {
        assert.match(res.headers.get('content-type'), /^text\/javascript/);
        for (const m of text.matchAll(/from '([^']+)'/g)) assert.ok(m[1].startsWith('./'), `${f} imports ${m[1]}`);
      }
      const etag = res.headers.get('etag');
      assert.match(etag, /^"[0-9a-f]{16}"$/);
      const again = await fetch(`${srv.baseURL}${f}`, { headers: { 'If-None-Match': etag } });
      assert.equal(again.status, 304, f);
    }
    const missing = await fetch(`${srv.baseURL}/web/nope.js`);
    assert.equal(missing.status, 404);
    assert.equal((await missing.json()).error.code, 'unknown_url');
  } finally {
    await srv.stop();
  }
});
