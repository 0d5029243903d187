// nitro serve's request log (docs/server.md "Request log"): one line on stderr per request, whose
// token counts equal the usage the client receives (the OpenAI SDK's view), streamed or not; a
// repeated conversation shows its cached prefix; requests without a generation log method, path
// and status only.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer, sleep, GPTOSS } from './helpers.mjs';

let server, client;
before(async () => {
  server = await startServer(GPTOSS, ['-c', '2048']);
  client = new OpenAI({ baseURL: `${server.baseURL}/v1`, apiKey: 'none', maxRetries: 0, timeout: 60000 });
});
after(async () => { assert.equal(await server.stop(), 0); });

/** The log lines of `method path` so far. */
async function logLines(method, path, count) {
  for (let i = 0; i < 100; i++) {  // the line is written once the response is
    const lines = server.log().split('\n').filter((l) => l.startsWith(`${method} ${path} `));
    if (lines.length >= count) return lines;
    await sleep(20);
  }
  assert.fail(`no ${count} log lines for ${method} ${path}:\n${server.log()}`);
}

const LINE = /^POST \/v1\/chat\/completions 200 \| prompt (\d+) tokens? \((\d+) cached\) \| completion (\d+) tokens? \| TTFT [\d.]+ ms( \| [\d.]+ tok\/s)? \| [\d.]+ s$/;

test('a chat completion logs the usage the client got, and its cached prefix the second time', async () => {
  const body = { model: 'tiny-gptoss-mxfp4', messages: [{ role: 'user', content: 'Write a haiku about caches.' }], max_tokens: 12, temperature: 0 };
  const first = await client.chat.completions.create(body);
  const second = await client.chat.completions.create(body);
  const lines = await logLines('POST', '/v1/chat/completions', 2);
  for (const [i, r] of [first, second].entries()) {
    const m = lines[i].match(LINE);
    assert.ok(m, lines[i]);
    assert.equal(Number(m[1]), r.usage.prompt_tokens);
    assert.equal(Number(m[2]), r.usage.prompt_tokens_details?.cached_tokens ?? 0);
    assert.equal(Number(m[3]), r.usage.completion_tokens);
  }
  // The same prompt again: all of it but its last token comes from the cache.
  assert.equal(Number(lines[1].match(LINE)[2]), second.usage.prompt_tokens - 1);
});

test('a streamed chat completion logs one line when the stream ends', async () => {
  const before = (await logLines('POST', '/v1/chat/completions', 2)).length;
  const stream = await client.chat.completions.create({
    model: 'tiny-gptoss-mxfp4', messages: [{ role: 'user', content: 'Count to three.' }], max_tokens: 8, temperature: 0,
    stream: true, stream_options: { include_usage: true },
  });
  let usage = null;
  for await (const chunk of stream) if (chunk.usage) usage = chunk.usage;
  const lines = await logLines('POST', '/v1/chat/completions', before + 1);
  const m = lines[before].match(LINE);
  assert.ok(m, lines[before]);
  assert.equal(Number(m[1]), usage.prompt_tokens);
  assert.equal(Number(m[3]), usage.completion_tokens);
});

test('requests without a generation log method, path and status', async () => {
  assert.equal((await fetch(`${server.baseURL}/health`)).status, 200);
  assert.equal((await fetch(`${server.baseURL}/no/such/route`)).status, 404);
  assert.deepEqual(await logLines('GET', '/health', 1), ['GET /health 200']);
  assert.deepEqual(await logLines('GET', '/no/such/route', 1), ['GET /no/such/route 404']);
});
