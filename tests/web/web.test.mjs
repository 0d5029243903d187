// nitro serve's web page in a real browser: Debian's chromium, headless, driven by puppeteer-core
// over the DevTools protocol. The page loads with no console error and no request to another
// origin; a typed message streams a reply whose rendered text equals the server's non-streamed
// answer to the same request; the expert map changes after it (pixels and the selection count,
// which equals the server's /v1/nitro/experts); a scripted reply shows its reasoning folded and
// its tool call; with --api-key the page asks for the key and goes live once it is typed.
//
// NITRO_WEB_SCREENSHOT=docs/web-ui.png writes a screenshot of the page after the chat (how
// docs/web-ui.png is made: docs/server.md).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import puppeteer from 'puppeteer-core';
import { startServer, API_KEY } from '../server/helpers.mjs';

const CHROMIUM = process.env.NITRO_CHROMIUM ?? '/usr/bin/chromium';
const EMBEDDED = new URL('../../models/tiny-moe-pystd.gguf', import.meta.url).pathname;
// The embedded model's shape (models/README.md): 8 layers, 64 experts, 4 used per token.
const N_LAYER = 8, N_USED = 4;
// This machine's closed network refuses connections: chromium must not try any on its own.
const FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];

let browser, profile;

before(async () => {
  profile = mkdtempSync(join(tmpdir(), 'nitro-chromium-'));
  browser = await puppeteer.launch({ executablePath: CHROMIUM, headless: true, userDataDir: profile, args: FLAGS });
});

after(async () => {
  await browser?.close();
  rmSync(profile, { recursive: true, force: true });
});

/** A page that records console errors, page errors, failed or refused requests, and other origins. */
async function openPage(baseURL) {
  const page = await browser.newPage();
  await page.setViewport({ width: 1280, height: 820 });
  const problems = [];
  const streams = [];
  page.on('console', (m) => { if (m.type() === 'error') problems.push(`console: ${m.text()}`); });
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('requestfailed', (r) => {
    // the page aborts its own streams when it closes or reconnects
    if (!r.url().endsWith('/v1/nitro/events')) problems.push(`request failed: ${r.url()} ${r.failure()?.errorText}`);
  });
  page.on('request', (r) => { if (!r.url().startsWith(baseURL)) problems.push(`request to another origin: ${r.url()}`); });
  page.on('response', (r) => {
    if (r.url().endsWith('/v1/chat/completions')) streams.push(r.headers()['content-type']);
  });
  return { page, problems, streams };
}

async function setField(page, selector, value) {
  await page.$eval(selector, (e) => { e.value = ''; });
  await page.type(selector, value);
}

/** Types a message, sends it with Enter, waits for the reply to finish; returns what it shows. */
async function chatTurn(page, text) {
  const n = await page.$$eval('.msg.assistant', (l) => l.length);
  await page.type('#prompt', text);
  await page.keyboard.press('Enter');
  await page.waitForFunction((k) => {
    const l = document.querySelectorAll('.msg.assistant');
    return l.length > k && l[l.length - 1].dataset.state !== 'streaming';
  }, { timeout: 60000 }, n);
  return page.$eval('.msg.assistant:last-of-type', (m) => ({
    state: m.dataset.state,
    content: m.querySelector('.content').textContent,
    reasoningShown: !m.querySelector('details.reasoning').hidden,
    reasoningOpen: m.querySelector('details.reasoning').open,
    reasoningSummary: m.querySelector('details.reasoning summary').textContent,
    reasoning: m.querySelector('.reasoning-text').textContent,
    tools: [...m.querySelectorAll('.tool-call')].map((t) => ({ name: t.querySelector('.tool-name').textContent, args: t.querySelector('pre').textContent })),
    meta: m.querySelector('.meta').textContent,
  }));
}

/** What the page's renderer shows for `text`: code fences become blocks without the ``` lines. */
function shown(text) {
  return text.split('```').map((p, i) => {
    if (i % 2 === 0) return p;
    const nl = p.indexOf('\n');
    return (nl >= 0 ? p.slice(nl + 1) : p).replace(/\n$/, '');
  }).join('');
}

test('the page chats, streams, folds reasoning, shows tool calls, and its expert map follows the requests', async () => {
  const srv = await startServer(EMBEDDED, ['--debug-scripted-output', '-c', '512']);
  const { page, problems, streams } = await openPage(srv.baseURL);
  try {
    await page.goto(`${srv.baseURL}/`, { waitUntil: 'load' });
    await page.waitForSelector('#conn.live', { timeout: 15000 });
    await page.waitForFunction(() => Number(document.getElementById('expert-map').dataset.version) > 0);
    assert.equal(await page.$eval('#engine', (e) => e.textContent), 'cpu');
    assert.match(await page.$eval('#model', (e) => e.textContent), /^tiny-moe-pystd · 8 layers · 64 experts, 4 per token · cpu /);
    assert.equal(await page.$eval('#expert-map', (c) => c.dataset.selections), '0');
    const mapBefore = await page.$eval('#expert-map', (c) => c.toDataURL());

    // A real turn, greedy, so that the server's non-streamed answer to the same request is the reference.
    await page.click('#settings summary');
    await setField(page, '#temperature', '0');
    await setField(page, '#max-tokens', '24');
    const prompt = 'def fibonacci(n):';
    const reply = await chatTurn(page, prompt);
    assert.equal(reply.state, 'done', reply.meta);
    assert.deepEqual(streams, ['text/event-stream'], 'the page streamed the reply');
    const ref = await (await fetch(`${srv.baseURL}/v1/chat/completions`, {
      method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ messages: [{ role: 'user', content: prompt }], temperature: 0, max_tokens: 24 }),
    })).json();
    const msg = ref.choices[0].message;
    assert.ok((msg.content ?? '') + (msg.reasoning_content ?? '') !== '', 'the model said something');
    assert.equal(reply.content, shown(msg.content ?? ''));
    assert.equal(reply.reasoning, msg.reasoning_content ?? '');
    assert.equal(reply.reasoningShown, Boolean(msg.reasoning_content));
    assert.equal(reply.reasoningOpen, false, 'reasoning is folded');
    assert.match(reply.meta, new RegExp(`^${ref.usage.completion_tokens} tokens in \\d+\\.\\d\\d s · first text after \\d+ ms · finish: ${ref.choices[0].finish_reason}$`));

    // The expert map follows: its selection count equals the server's (two requests so far: the
    // page's and the reference, whose prompt came from the cached prefix but for the tokens it
    // reports uncached), which equals the tokens evaluated x layers x experts per token.
    const { prompt_tokens: np, completion_tokens: nc } = ref.usage;
    const cached = ref.usage.prompt_tokens_details?.cached_tokens ?? 0;
    const evaluated = (np + nc - 1) + (np - cached + nc - 1);
    await page.waitForFunction((n) => Number(document.getElementById('expert-map').dataset.selections) === n,
      { timeout: 10000 }, evaluated * N_LAYER * N_USED);
    const experts = await (await fetch(`${srv.baseURL}/v1/nitro/experts`)).json();
    const total = experts.layers.reduce((a, L) => a + L.selections.reduce((b, v) => b + v, 0), 0);
    assert.equal(total, evaluated * N_LAYER * N_USED);
    assert.notEqual(await page.$eval('#expert-map', (c) => c.toDataURL()), mapBefore, 'the map was redrawn with the new selections');
    await page.waitForFunction(() => document.getElementById('c-ttft').textContent !== '–');
    assert.match(await page.$eval('#c-ttft', (e) => e.textContent), /^\d+$/);
    assert.match(await page.$eval('#c-kv', (e) => e.textContent), /^\d+\.\d%$/);
    assert.match(await page.$eval('#c-split', (e) => e.textContent), /^GPU 0\.0% · CPU 100\.0% of /);

    // A scripted reply with reasoning and a tool call (the server's test-only field, sent through
    // the page's "extra request fields").
    const tool = { type: 'function', function: { name: 'get_weather', description: 'Current weather',
      parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } };
    const script = '<|channel|>analysis<|message|>Use the tool.<|end|><|start|>assistant<|channel|>commentary ' +
      'to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>';
    await setField(page, '#extra', JSON.stringify({ tools: [tool], debug_scripted_output: script }));
    await setField(page, '#max-tokens', '64');  // the script's tokens, and its end
    const called = await chatTurn(page, 'What is the weather in Paris?');
    assert.equal(called.state, "done", called.meta);
    assert.deepEqual(called.tools, [{ name: 'tool call: get_weather', args: '{\n  "city": "Paris"\n}' }]);
    assert.equal(called.reasoning, 'Use the tool.');
    assert.equal(called.reasoningSummary, 'Reasoning (13 characters)');
    assert.equal(called.reasoningOpen, false);
    assert.match(called.meta, /finish: tool_calls$/);

    await page.$eval('#extra', (e) => { e.value = ''; });
    await page.click('#settings summary');  // fold the settings for the screenshot
    await page.waitForFunction((n) => Number(document.getElementById('expert-map').dataset.selections) > n, {}, evaluated * N_LAYER * N_USED);
    if (process.env.NITRO_WEB_SCREENSHOT) {
      await new Promise((r) => setTimeout(r, 300));
      writeFileSync(process.env.NITRO_WEB_SCREENSHOT, await page.screenshot({ type: 'png' }));
    }
    assert.deepEqual(problems, []);
  } finally {
    await page.close();
    await srv.stop();
  }
});

test('with --api-key the page asks for the key, then goes live', async () => {
  const srv = await startServer(EMBEDDED, ['--api-key', API_KEY]);
  const { page, problems } = await openPage(srv.baseURL);
  try {
    await page.goto(`${srv.baseURL}/`, { waitUntil: 'load' });
    await page.waitForFunction(() => document.getElementById('conn').textContent.startsWith('API key needed'), { timeout: 15000 });
    assert.equal(await page.$eval('#settings', (d) => d.open), true, 'the settings open on the key field');
    await page.type('#api-key', API_KEY);
    await page.$eval('#api-key', (e) => e.dispatchEvent(new Event('change')));
    await page.waitForSelector('#conn.live', { timeout: 15000 });
    assert.equal(await page.$eval('#engine', (e) => e.textContent), 'cpu');
    // The browser's own 401 lines for the keyless attempt are expected; nothing else.
    assert.deepEqual(problems.filter((p) => !/status of 401/.test(p)), []);
  } finally {
    await page.evaluate(() => localStorage.clear());
    await page.close();
    await srv.stop();
  }
});
