// nitro serve with the official OpenAI Node SDK: chat completions (streaming and not), usage,
// logprobs against `nitro run`, max_tokens, stop sequences, prefix reuse, tool calls, reasoning,
// a tool round trip, /v1/completions and /v1/models. The fixture model has random weights, so
// content is checked against the engine's own reference (`nitro run`, `nitro tokenize --chat`)
// and, where a behaviour needs specific output (tool calls, reasoning), against scripted output
// (--debug-scripted-output: the server emits given tokens instead of sampling; everything else,
// prefill, decode, parsing and SSE, is the real path).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer, metrics, renderChat, runGreedy, collectChatStream, GPTOSS, API_KEY } from './helpers.mjs';

let server, client;
const MODEL = 'tiny-gptoss-mxfp4';

before(async () => {
  server = await startServer(GPTOSS, ['-c', '8192', '--debug-scripted-output'], { NITRO_API_KEY: API_KEY });
  client = new OpenAI({ baseURL: `${server.baseURL}/v1`, apiKey: API_KEY, maxRetries: 0, timeout: 60000 });
});
after(async () => { assert.equal(await server.stop(), 0, 'server exits cleanly on SIGTERM'); });

const USER = [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Name three colors.' }];

const WEATHER_TOOL = {
  type: 'function',
  function: {
    name: 'get_weather', description: 'Current weather',
    parameters: { type: 'object', properties: { location: { type: 'object', properties: { city: { type: 'string' }, country: { type: 'string' } }, required: ['city'] }, unit: { type: 'string', enum: ['c', 'f'] } }, required: ['location'] },
  },
};
const WRITE_TOOL = {
  type: 'function',
  function: { name: 'write_file', description: 'Write a file', parameters: { type: 'object', properties: { path: { type: 'string' }, content: { type: 'string', description: 'multi-line text' } }, required: ['path', 'content'] } },
};

test('models and health', async () => {
  const list = await client.models.list();
  assert.deepEqual(list.data.map((m) => m.id), [MODEL]);
  const health = await (await fetch(`${server.baseURL}/health`)).json();
  assert.equal(health.status, 'ok');
});

test('non-streaming chat equals nitro run greedy on the same prompt', async () => {
  const r = await client.chat.completions.create({ model: MODEL, messages: USER, max_tokens: 12, temperature: 0, logprobs: true, top_logprobs: 3 });
  const ref = renderChat(GPTOSS, USER);
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.model, MODEL);
  assert.equal(r.usage.prompt_tokens, ref.ids.length, 'prompt rendered and tokenized as nitro tokenize --chat');
  const run = runGreedy(GPTOSS, ref.ids, 12);
  assert.equal(r.usage.completion_tokens, run.ids.length);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  const lp = r.choices[0].logprobs.content;
  const bytes = Buffer.from(lp.flatMap((e) => e.bytes));
  assert.equal(bytes.toString('utf8'), run.text, 'the generated tokens are nitro run\'s greedy tokens');
  for (const e of lp) {
    assert.equal(e.top_logprobs.length, 3);
    assert.ok(e.logprob <= 0);
    assert.ok(Math.abs(e.logprob - e.top_logprobs[0].logprob) < 1e-5, 'greedy picks the most likely token');
  }
  assert.equal(r.choices[0].finish_reason, run.stop_reason === 'eos' ? 'stop' : 'length');
  const m = r.choices[0].message;
  assert.equal(m.role, 'assistant');
  assert.ok((m.content ?? '').length + (m.reasoning_content ?? '').length > 0, 'some text came back');
});

test('streamed deltas concatenate to the non-streamed message (seeded sampling), usage in the last chunk', async () => {
  const params = { model: MODEL, messages: USER, max_tokens: 24, temperature: 0.9, top_p: 0.95, top_k: 50, min_p: 0.01, seed: 1234 };
  const full = await client.chat.completions.create(params);
  const s = await collectChatStream(await client.chat.completions.create({ ...params, stream: true, stream_options: { include_usage: true } }));
  assert.equal(s.roleFirst, 'assistant');
  assert.equal(s.content, full.choices[0].message.content ?? '');
  assert.equal(s.reasoning, full.choices[0].message.reasoning_content ?? '');
  assert.equal(s.finish, full.choices[0].finish_reason);
  assert.ok(s.usage, 'usage chunk present');
  assert.equal(s.usage.completion_tokens, full.usage.completion_tokens);
  assert.equal(s.usage.prompt_tokens, full.usage.prompt_tokens);
  const other = await client.chat.completions.create({ ...params, seed: 99 });
  assert.equal(other.usage.prompt_tokens, full.usage.prompt_tokens);
});

test('max_tokens 1..8 returns 200 with finish_reason length and exactly that many tokens', async () => {
  const ref = renderChat(GPTOSS, USER);
  const run = runGreedy(GPTOSS, ref.ids, 8);
  for (let n = 1; n <= 8; n++) {
    const field = n % 2 ? { max_tokens: n } : { max_completion_tokens: n };
    const r = await client.chat.completions.create({ model: MODEL, messages: USER, temperature: 0, ...field, logprobs: true });
    const ended = run.stop_reason === 'eos' && run.ids.length <= n;
    assert.equal(r.choices[0].finish_reason, ended ? 'stop' : 'length', `n=${n}`);
    assert.equal(r.usage.completion_tokens, Math.min(n, run.ids.length), `n=${n}`);
    const got = Buffer.from(r.choices[0].logprobs.content.flatMap((e) => e.bytes));
    const want = Buffer.from(runGreedy(GPTOSS, ref.ids, n).text);
    assert.ok(got.equals(want), `n=${n}: tokens are the first ${n} greedy tokens`);
  }
});

test('max_tokens 1, 2, 3 cut inside a harmony header: 200, length, no markup leaks', async () => {
  const script = '<|channel|>analysis<|message|>Thinking hard.<|end|><|start|>assistant<|channel|>final<|message|>Blue.<|return|>';
  for (let n = 1; n <= 3; n++) {
    const r = await client.chat.completions.create({ model: MODEL, messages: USER, max_tokens: n, debug_scripted_output: script });
    assert.equal(r.choices[0].finish_reason, 'length');
    assert.equal(r.choices[0].message.content, '');
    assert.ok(!(r.choices[0].message.reasoning_content ?? '').includes('<|'));
    const s = await collectChatStream(await client.chat.completions.create({ model: MODEL, messages: USER, max_tokens: n, stream: true, debug_scripted_output: script }));
    assert.equal(s.finish, 'length');
    assert.equal(s.content, '');
  }
});

test('stop sequences: real model output is cut before the stop string, which is never emitted', async () => {
  const base = { model: MODEL, messages: [{ role: 'user', content: 'Tell me a story.' }], temperature: 0, max_tokens: 40 };
  const full = await client.completions.create({ model: MODEL, prompt: 'Once upon a time', temperature: 0, max_tokens: 30 });
  const text = full.choices[0].text;
  assert.ok(text.length > 12, `enough text to cut: ${JSON.stringify(text)}`);
  const stop = text.slice(8, 11);
  const want = text.slice(0, text.indexOf(stop));
  const cut = await client.completions.create({ model: MODEL, prompt: 'Once upon a time', temperature: 0, max_tokens: 30, stop: [stop, '\u0000never'] });
  assert.equal(cut.choices[0].text, want);
  assert.equal(cut.choices[0].finish_reason, 'stop');
  assert.ok(cut.usage.completion_tokens < full.usage.completion_tokens, 'generation stopped early');
  let streamed = '';
  let finish = null;
  for await (const c of await client.completions.create({ model: MODEL, prompt: 'Once upon a time', temperature: 0, max_tokens: 30, stop, stream: true })) {
    streamed += c.choices[0]?.text ?? '';
    finish = c.choices[0]?.finish_reason ?? finish;
  }
  assert.equal(streamed, want);
  assert.equal(finish, 'stop');
  // Chat: a stop string in scripted content.
  const r = await client.chat.completions.create({ ...base, stop: 'STOP', debug_scripted_output: '<|channel|>final<|message|>One, two, STOP, three.<|return|>' });
  assert.equal(r.choices[0].message.content, 'One, two, ');
  assert.equal(r.choices[0].finish_reason, 'stop');
  const s = await collectChatStream(await client.chat.completions.create({ ...base, stop: ['STOP'], stream: true, debug_scripted_output: '<|channel|>final<|message|>One, two, STOP, three.<|return|>' }));
  assert.equal(s.content, 'One, two, ');
});

test('reasoning_content from the analysis channel, streamed and not; reasoning_effort reaches the prompt', async () => {
  const script = '<|channel|>analysis<|message|>User wants colors. Pick three.<|end|><|start|>assistant<|channel|>final<|message|>Red, green, blue.<|return|>';
  const r = await client.chat.completions.create({ model: MODEL, messages: USER, debug_scripted_output: script, reasoning_effort: 'high' });
  assert.equal(r.choices[0].message.reasoning_content, 'User wants colors. Pick three.');
  assert.equal(r.choices[0].message.content, 'Red, green, blue.');
  assert.equal(r.choices[0].finish_reason, 'stop');
  const s = await collectChatStream(await client.chat.completions.create({ model: MODEL, messages: USER, debug_scripted_output: script, stream: true }));
  assert.equal(s.reasoning, 'User wants colors. Pick three.');
  assert.equal(s.content, 'Red, green, blue.');
  const high = renderChat(GPTOSS, USER, null, { reasoning_effort: 'high' });
  assert.match(high.rendered, /Reasoning: high/);
  assert.equal(r.usage.prompt_tokens, high.ids.length, 'reasoning_effort high rendered into the system message');
});

test('tool calls (nested-object and multi-line string parameters), streamed as OpenAI streams them', async () => {
  const args = { path: 'notes/todo.txt', content: 'line one\nline two\n\tindented "quoted"' };
  const script = `<|channel|>analysis<|message|>Save it.<|end|><|start|>assistant<|channel|>commentary to=functions.write_file <|constrain|>json<|message|>${JSON.stringify(args)}<|call|>`;
  const params = { model: MODEL, messages: [{ role: 'user', content: 'Save my todo list.' }], tools: [WEATHER_TOOL, WRITE_TOOL], debug_scripted_output: script };
  const r = await client.chat.completions.create(params);
  const m = r.choices[0].message;
  assert.equal(r.choices[0].finish_reason, 'tool_calls');
  assert.equal(m.content, null);
  assert.equal(m.tool_calls.length, 1);
  assert.equal(m.tool_calls[0].type, 'function');
  assert.equal(m.tool_calls[0].function.name, 'write_file');
  assert.deepEqual(JSON.parse(m.tool_calls[0].function.arguments), args);
  assert.match(m.tool_calls[0].id, /^call_/);
  const s = await collectChatStream(await client.chat.completions.create({ ...params, stream: true }));
  assert.equal(s.finish, 'tool_calls');
  assert.ok(s.toolDeltas.length >= 3, 'arguments arrive in pieces');
  assert.equal(s.toolDeltas[0].function.name, 'write_file');
  assert.match(s.toolDeltas[0].id, /^call_/);
  for (const d of s.toolDeltas.slice(1)) assert.equal(d.id, undefined, 'id only in the first delta');
  assert.deepEqual(JSON.parse(s.toolCalls[0].arguments), args);

  // Nested-object arguments with a named tool_choice: the forced opening makes the call.
  const nested = { location: { city: 'Paris', country: 'FR' }, unit: 'c' };
  const named = await client.chat.completions.create({
    model: MODEL, messages: [{ role: 'user', content: 'Weather?' }], tools: [WEATHER_TOOL, WRITE_TOOL],
    tool_choice: { type: 'function', function: { name: 'get_weather' } }, debug_scripted_output: `${JSON.stringify(nested)}<|call|>`,
  });
  assert.equal(named.choices[0].message.tool_calls[0].function.name, 'get_weather');
  assert.deepEqual(JSON.parse(named.choices[0].message.tool_calls[0].function.arguments), nested);
  // The real model under a named tool_choice: the call is there whatever the model writes.
  const real = await client.chat.completions.create({
    model: MODEL, messages: [{ role: 'user', content: 'Weather?' }], tools: [WEATHER_TOOL], temperature: 0, max_tokens: 6,
    tool_choice: { type: 'function', function: { name: 'get_weather' } },
  });
  assert.equal(real.choices[0].message.tool_calls[0].function.name, 'get_weather');
});

test('tool round trip: the server takes its own tool call back as history, rendered as the template does', async () => {
  const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];
  const call = await client.chat.completions.create({
    model: MODEL, messages, tools: [WEATHER_TOOL],
    debug_scripted_output: '<|channel|>analysis<|message|>Use the tool.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"location": {"city": "Paris"}}<|call|>',
  });
  const msg = call.choices[0].message;
  messages.push(msg);  // exactly as returned: content null, reasoning_content, tool_calls
  messages.push({ role: 'tool', tool_call_id: msg.tool_calls[0].id, content: '{"temp_c": 18, "sky": "clear"}' });
  const final = await client.chat.completions.create({
    model: MODEL, messages, tools: [WEATHER_TOOL],
    debug_scripted_output: '<|channel|>final<|message|>It is 18 C and clear in Paris.<|return|>',
  });
  assert.equal(final.choices[0].message.content, 'It is 18 C and clear in Paris.');
  assert.equal(final.choices[0].finish_reason, 'stop');
  const ref = renderChat(GPTOSS, [
    messages[0],
    { role: 'assistant', thinking: 'Use the tool.', tool_calls: [{ id: msg.tool_calls[0].id, type: 'function', function: { name: 'get_weather', arguments: { location: { city: 'Paris' } } } }] },
    messages[2],
  ], [WEATHER_TOOL]);
  assert.equal(final.usage.prompt_tokens, ref.ids.length, 'history rendered as nitro tokenize --chat renders it');
  assert.ok(final.usage.prompt_tokens_details.cached_tokens > 0, 'the shared prefix was reused');
});

test('prefix reuse: a follow-up reuses the cached prefix and gives the same output as a fresh prompt', async () => {
  const m0 = await metrics(server.baseURL, { Authorization: `Bearer ${API_KEY}` });
  const first = await client.chat.completions.create({ model: MODEL, messages: USER, temperature: 0, max_tokens: 8 });
  const follow = [...USER, { role: 'assistant', content: first.choices[0].message.content ?? '' }, { role: 'user', content: 'And three more?' }];
  const second = await client.chat.completions.create({ model: MODEL, messages: follow, temperature: 0, max_tokens: 8 });
  assert.ok(second.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens,
    `cached ${second.usage.prompt_tokens_details.cached_tokens} >= first prompt ${first.usage.prompt_tokens}`);
  // Flush the cache with an unrelated prompt, then the same follow-up from scratch.
  await client.completions.create({ model: MODEL, prompt: [7, 7, 7], max_tokens: 1 });
  const fresh = await client.chat.completions.create({ model: MODEL, messages: follow, temperature: 0, max_tokens: 8 });
  assert.equal(fresh.usage.prompt_tokens_details.cached_tokens, 0);
  assert.equal(fresh.choices[0].message.content, second.choices[0].message.content);
  assert.equal(fresh.choices[0].message.reasoning_content, second.choices[0].message.reasoning_content);
  const m1 = await metrics(server.baseURL, { Authorization: `Bearer ${API_KEY}` });
  assert.ok(m1.nitro_prompt_tokens_reused_total - m0.nitro_prompt_tokens_reused_total >= second.usage.prompt_tokens_details.cached_tokens);
  assert.ok(m1.nitro_generated_tokens_total > m0.nitro_generated_tokens_total);
  assert.ok(m1.nitro_decode_tokens_per_second > 0 && m1.nitro_prompt_tokens_per_second > 0);
});

test('/v1/completions: text and token-id prompts equal nitro run, streaming equals non-streaming', async () => {
  const ids = [1, 500, 2000, 30000, 42];
  const run = runGreedy(GPTOSS, ids, 10);
  const r = await client.completions.create({ model: MODEL, prompt: ids, temperature: 0, max_tokens: 10, logprobs: 2 });
  assert.equal(r.object, 'text_completion');
  assert.equal(r.usage.prompt_tokens, ids.length);
  if (run.stop_reason !== 'eos') assert.equal(r.choices[0].text, run.text);
  assert.equal(r.choices[0].logprobs.tokens.length, r.choices[0].logprobs.token_logprobs.length);
  let streamed = '';
  let usage = null;
  for await (const c of await client.completions.create({ model: MODEL, prompt: ids, temperature: 0, max_tokens: 10, stream: true, stream_options: { include_usage: true } })) {
    streamed += c.choices[0]?.text ?? '';
    if (c.usage) usage = c.usage;
  }
  assert.equal(streamed, r.choices[0].text);
  assert.equal(usage.completion_tokens, r.usage.completion_tokens);
});
