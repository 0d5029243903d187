// nitro serve with a Qwen3 (ChatML) model and the OpenAI SDK: enable_thinking through
// chat_template_kwargs, <think> reasoning, <tool_call> parsing (several calls, parallel_tool_calls),
// UTF-8 through the real tokenizer, and a greedy chat equal to `nitro run`.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer, renderChat, runGreedy, collectChatStream, QWEN3 } from './helpers.mjs';

let server, client;
const MODEL = 'tiny-qwen3moe-q8';
const USER = [{ role: 'developer', content: 'Answer in one word.' }, { role: 'user', content: 'Capital of France?' }];

before(async () => {
  server = await startServer(QWEN3, ['-c', '2048', '--debug-scripted-output']);
  client = new OpenAI({ baseURL: `${server.baseURL}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
});
after(async () => { assert.equal(await server.stop(), 0); });

test('enable_thinking false via chat_template_kwargs renders the empty think block', async () => {
  const asSystem = [{ role: 'system', content: USER[0].content }, USER[1]];
  const on = await client.chat.completions.create({ model: MODEL, messages: USER, max_tokens: 1, temperature: 0 });
  const off = await client.chat.completions.create({ model: MODEL, messages: USER, max_tokens: 1, temperature: 0, chat_template_kwargs: { enable_thinking: false } });
  assert.equal(on.usage.prompt_tokens, renderChat(QWEN3, asSystem).ids.length, 'developer is rendered as system');
  const refOff = renderChat(QWEN3, asSystem, null, { enable_thinking: false });
  assert.match(refOff.rendered, /<think>\n\n<\/think>\n\n$/);
  assert.equal(off.usage.prompt_tokens, refOff.ids.length);
  await assert.rejects(client.chat.completions.create({ model: MODEL, messages: USER, chat_template_kwargs: { enable_thinking: 'no' } }),
    (e) => e.status === 400 && e.param === 'chat_template_kwargs');
});

test('greedy chat equals nitro run on the rendered prompt', async () => {
  const ref = renderChat(QWEN3, [{ role: 'system', content: USER[0].content }, USER[1]]);
  const run = runGreedy(QWEN3, ref.ids, 10);
  const r = await client.chat.completions.create({ model: MODEL, messages: USER, max_tokens: 10, temperature: 0, logprobs: true });
  assert.equal(Buffer.from(r.choices[0].logprobs.content.flatMap((e) => e.bytes)).toString('utf8'), run.text);
});

test('<think> reasoning and content, streamed and not, with non-ASCII text', async () => {
  const script = '<think>\nParis is the capital. Ça va: 🙂\n</think>\n\nParis — évidemment 🇫🇷<|im_end|>';
  const r = await client.chat.completions.create({ model: MODEL, messages: USER, debug_scripted_output: script });
  assert.equal(r.choices[0].message.reasoning_content, 'Paris is the capital. Ça va: 🙂');
  assert.equal(r.choices[0].message.content, 'Paris — évidemment 🇫🇷');
  const s = await collectChatStream(await client.chat.completions.create({ model: MODEL, messages: USER, debug_scripted_output: script, stream: true }));
  assert.equal(s.reasoning, r.choices[0].message.reasoning_content);
  assert.equal(s.content, r.choices[0].message.content);
  assert.equal(s.finish, 'stop');
});

test('several <tool_call>s; parallel_tool_calls false keeps the first', async () => {
  const script = '<tool_call>\n{"name": "get_weather", "arguments": {"location": {"city": "Paris", "country": "FR"}}}\n</tool_call>\n'
    + '<tool_call>\n{"name": "write_file", "arguments": {"path": "a.txt", "content": "one\\ntwo"}}\n</tool_call><|im_end|>';
  const tools = [
    { type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { location: { type: 'object', properties: { city: { type: 'string' } } } } } } },
    { type: 'function', function: { name: 'write_file', parameters: { type: 'object', properties: { path: { type: 'string' }, content: { type: 'string' } } } } },
  ];
  const r = await client.chat.completions.create({ model: MODEL, messages: USER, tools, debug_scripted_output: script });
  const calls = r.choices[0].message.tool_calls;
  assert.equal(r.choices[0].finish_reason, 'tool_calls');
  assert.deepEqual(calls.map((c) => c.function.name), ['get_weather', 'write_file']);
  assert.deepEqual(JSON.parse(calls[0].function.arguments), { location: { city: 'Paris', country: 'FR' } });
  assert.equal(JSON.parse(calls[1].function.arguments).content, 'one\ntwo');
  const s = await collectChatStream(await client.chat.completions.create({ model: MODEL, messages: USER, tools, debug_scripted_output: script, stream: true }));
  assert.deepEqual(s.toolCalls.map((c) => c.name), ['get_weather', 'write_file']);
  assert.deepEqual(s.toolCalls.map((c) => JSON.parse(c.arguments)), calls.map((c) => JSON.parse(c.function.arguments)));
  const one = await client.chat.completions.create({ model: MODEL, messages: USER, tools, parallel_tool_calls: false, debug_scripted_output: script });
  assert.equal(one.choices[0].message.tool_calls.length, 1);
  assert.equal(one.choices[0].finish_reason, 'tool_calls');
  // Round trip: the calls and their results as history.
  const history = [...USER, r.choices[0].message,
    { role: 'tool', tool_call_id: calls[0].id, content: '18 C' }, { role: 'tool', tool_call_id: calls[1].id, content: 'written' }];
  const next = await client.chat.completions.create({ model: MODEL, messages: history, tools, max_tokens: 3, temperature: 0 });
  const ref = renderChat(QWEN3, [{ role: 'system', content: USER[0].content }, USER[1],
    { role: 'assistant', content: '', tool_calls: calls.map((c) => ({ type: 'function', function: { name: c.function.name, arguments: c.function.arguments } })) },
    history[3], history[4]], tools);
  assert.equal(next.usage.prompt_tokens, ref.ids.length);
});
