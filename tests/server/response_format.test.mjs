// response_format enforced by grammar-constrained sampling, through the OpenAI Node SDK: on the
// embedded model (harmony) and the Qwen3 fixture (ChatML), greedy and sampled, streamed and not,
// several at once (--parallel 2: each slot keeps its own grammar state), every answer is parsed
// with JSON.parse and validated against its schema by ajv (an independent JSON Schema validator,
// pinned in package.json). The schemas bound every string, array and number, so any path the
// sampler takes ends within max_tokens (1,500 tokens cover the longest value they allow, one byte
// per token); json_object, which bounds nothing, is checked for what can be checked.
// Unsupported schema keywords are a 400 naming the keyword; the grammar's time per token is bounded.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Ajv from 'ajv';
import { startServer, metrics, collectChatStream, QWEN3 } from './helpers.mjs';

const EMBEDDED = new URL('../../models/tiny-moe-pystd.gguf', import.meta.url).pathname;
const MAX_TOKENS = 1500;
let server, client;

before(async () => {
  server = await startServer(EMBEDDED, ['--parallel', '2', '--reasoning-budget', '6']);
  client = new OpenAI({ baseURL: `${server.baseURL}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
});
after(async () => { assert.equal(await server.stop(), 0, 'server exits cleanly on SIGTERM'); });

const SCHEMAS = {
  person: {
    type: 'object',
    properties: {
      name: { type: 'string', minLength: 1, maxLength: 12 },
      age: { type: 'integer' },
      email: { anyOf: [{ type: 'string', maxLength: 16 }, { type: 'null' }] },
      role: { enum: ['admin', 'user', 'guest'] },
      tags: { type: 'array', items: { type: 'string', maxLength: 8 }, maxItems: 3 },
      active: { type: 'boolean' },
    },
    required: ['name', 'age', 'role', 'tags', 'active'],
    additionalProperties: false,
  },
  path: {
    $defs: {
      point: { type: 'object', properties: { x: { type: 'integer' }, y: { type: 'number' } }, required: ['x', 'y'], additionalProperties: false },
    },
    type: 'object',
    properties: {
      label: { const: 'path' },
      points: { type: 'array', items: { $ref: '#/$defs/point' }, minItems: 1, maxItems: 3 },
      closed: { type: 'boolean' },
      note: { type: ['string', 'null'], maxLength: 10 },
    },
    required: ['label', 'points', 'closed'],
    additionalProperties: false,
  },
  color: { enum: ['red', 'green', 'blue', 7, null] },
  mixed: { type: 'array', items: { anyOf: [{ type: 'number' }, { type: 'string', maxLength: 5 }, { type: 'boolean' }] }, minItems: 2, maxItems: 4 },
};

const ajv = new Ajv({ strict: true, allErrors: true });
const validators = Object.fromEntries(Object.entries(SCHEMAS).map(([k, s]) => [k, ajv.compile(s)]));

/** Parses `text` with JSON.parse and validates it against schema `name` with ajv. */
function assertValid(text, name, what) {
  let value;
  assert.doesNotThrow(() => { value = JSON.parse(text); }, `${what}: not JSON: ${JSON.stringify(text)}`);
  const v = validators[name];
  assert.ok(v(value), `${what}: ${JSON.stringify(text)} does not validate: ${ajv.errorsText(v.errors)}`);
  return value;
}

const MESSAGES = [{ role: 'user', content: 'Reply with the JSON object.' }];
const chatReq = (name, sampling, extra = {}) => ({
  model: 'tiny-moe-pystd', messages: MESSAGES, max_tokens: MAX_TOKENS, ...sampling,
  response_format: { type: 'json_schema', json_schema: { name, schema: SCHEMAS[name], strict: true } }, ...extra,
});
const SAMPLINGS = [
  { temperature: 0 },
  { temperature: 1, seed: 1 },
  { temperature: 1, seed: 2, top_p: 0.9 },
  { temperature: 0.7, seed: 3, top_k: 20, min_p: 0.05 },
];

test('every chat answer parses and validates: 4 schemas x greedy/sampled x streamed/not, two at a time', async () => {
  const m0 = await metrics(server.baseURL);
  const jobs = [];
  for (const name of Object.keys(SCHEMAS))
    for (const [i, sampling] of SAMPLINGS.entries())
      jobs.push({ name, i, sampling, budget: i % 2 === 0 ? 0 : undefined });  // undefined: the server's --reasoning-budget 6
  let answers = 0;
  for (let k = 0; k < jobs.length; k += 2) {
    const batch = jobs.slice(k, k + 2);
    const extra = (j) => (j.budget === undefined ? {} : { reasoning_budget_tokens: j.budget });
    const plain = await Promise.all(batch.map((j) => client.chat.completions.create(chatReq(j.name, j.sampling, extra(j)))));
    const streamed = await Promise.all(batch.map((j) => client.chat.completions.create({ ...chatReq(j.name, j.sampling, extra(j)), stream: true })
      .then(collectChatStream)));
    for (const [n, j] of batch.entries()) {
      const what = `${j.name} ${JSON.stringify(j.sampling)}`;
      assert.equal(plain[n].choices[0].finish_reason, 'stop', `${what}: finished by end of generation`);
      assertValid(plain[n].choices[0].message.content, j.name, what);
      assert.equal(streamed[n].finish, 'stop', `${what} (stream)`);
      assertValid(streamed[n].content, j.name, `${what} (stream)`);
      assert.equal(streamed[n].content, plain[n].choices[0].message.content, `${what}: streamed = not streamed`);
      assert.equal(streamed[n].reasoning, plain[n].choices[0].message.reasoning_content ?? '', `${what}: same reasoning`);
      if (j.budget === 0) assert.equal(plain[n].choices[0].message.reasoning_content ?? '', '', `${what}: budget 0, no reasoning`);
      answers += 2;
    }
  }
  assert.equal(answers, 32);
  const m1 = await metrics(server.baseURL);
  const masks = m1.nitro_grammar_masks_total - m0.nitro_grammar_masks_total;
  const seconds = m1.nitro_grammar_mask_seconds_total - m0.nitro_grammar_mask_seconds_total;
  assert.ok(masks > 32 * 4, `tokens sampled under a grammar: ${masks}`);
  // Grammar time per token on the 8,192-token vocabulary (MEASURED ~0.01-0.05 ms here); loose bound.
  assert.ok(seconds / masks < 0.005, `grammar time per token ${(1000 * seconds / masks).toFixed(3)} ms`);
});

test('json_object: every complete answer is a JSON object, every cut one a prefix of one; greedy streamed = not streamed', async () => {
  // json_object bounds nothing (a string may go on), so a small code model does not always close
  // its value within max_tokens; the bounded schemas above are where "every answer validates" is
  // guaranteed. Here: whatever ends is an object, whatever is cut fails JSON.parse only at its end.
  const req = (sampling, stream) => client.chat.completions.create({
    model: 'tiny-moe-pystd', messages: MESSAGES, max_tokens: 300, reasoning_budget_tokens: 0, ...sampling,
    response_format: { type: 'json_object' }, ...(stream ? { stream: true } : {}),
  });
  const answers = [];
  const greedy = await req({ temperature: 0 }, false);
  const greedyStream = await collectChatStream(await req({ temperature: 0 }, true));
  assert.equal(greedyStream.content, greedy.choices[0].message.content, 'streamed = not streamed');
  assert.equal(greedyStream.finish, greedy.choices[0].finish_reason);
  answers.push(['greedy', greedy]);
  for (let seed = 1; seed <= 6; seed++) answers.push([`seed ${seed}`, await req({ temperature: 0.8, seed }, false)]);
  let complete = 0;
  for (const [what, r] of answers) {
    const content = r.choices[0].message.content;
    let v;
    try {
      v = JSON.parse(content);
    } catch (e) {
      // Only a cut answer may fail, and only by running out of input, not at a wrong byte
      // (V8 names the position where the input ran out: its length in UTF-16 units).
      assert.equal(r.choices[0].finish_reason, 'length', `${what}: ${e.message}: ${content}`);
      assert.ok(/end of JSON input/.test(e.message) || e.message.endsWith(`position ${content.length}`), `${what}: ${e.message}`);
      assert.match(content.trimStart(), /^\{/);
      continue;
    }
    assert.ok(v !== null && typeof v === 'object' && !Array.isArray(v), `${what}: an object: ${content}`);
    complete++;
  }
  assert.ok(complete >= 1, `${complete} of ${answers.length} answers completed`);
});

test('/v1/completions takes response_format too: the whole output is the value', async () => {
  const prompt = 'import json\n\nrecord = json.loads(\'\'\'';
  for (const sampling of [{ temperature: 0 }, { temperature: 1, seed: 9 }]) {
    const body = { model: 'tiny-moe-pystd', prompt, max_tokens: MAX_TOKENS, ...sampling,
      response_format: { type: 'json_schema', json_schema: { name: 'person', schema: SCHEMAS.person } } };
    const r = await client.completions.create(body);
    assert.equal(r.choices[0].finish_reason, 'stop');
    assertValid(r.choices[0].text, 'person', `completions ${JSON.stringify(sampling)}`);
    let text = '';
    for await (const c of await client.completions.create({ ...body, stream: true })) text += c.choices[0]?.text ?? '';
    assert.equal(text, r.choices[0].text, 'streamed = not streamed');
  }
});

test('unsupported or invalid schemas are an OpenAI-shaped 400 naming the keyword', async () => {
  const cases = [
    [{ type: 'string', pattern: '^a+$' }, 'unsupported_schema', /'pattern' \(at #\) is not supported/],
    [{ type: 'object', properties: { when: { type: 'string', format: 'date-time' } } }, 'unsupported_schema', /'format' \(at #\/properties\/when\)/],
    [{ type: 'integer', minimum: 0 }, 'unsupported_schema', /'minimum'/],
    [{ oneOf: [{ type: 'string' }, { type: 'integer' }] }, 'unsupported_schema', /'oneOf'/],
    [{ type: 'array', uniqueItems: true }, 'unsupported_schema', /'uniqueItems'/],
    [{ type: 'strin' }, 'invalid_schema', /unknown type 'strin'/],
    [{ $ref: '#/$defs/nowhere' }, 'invalid_schema', /does not point at anything/],
    [{ type: 'object', properties: { a: false }, required: ['a'] }, 'invalid_schema', /no JSON value satisfies/],
  ];
  for (const [schema, code, re] of cases) {
    await assert.rejects(client.chat.completions.create({ model: 'tiny-moe-pystd', messages: MESSAGES,
      response_format: { type: 'json_schema', json_schema: { name: 'x', schema } } }),
    (e) => e.status === 400 && e.code === code && e.param === 'response_format.json_schema.schema' && re.test(e.message),
    JSON.stringify(schema));
  }
  const bad = [
    [{ response_format: { type: 'json_schema' } }, 'response_format.json_schema'],
    [{ response_format: { type: 'json_schema', json_schema: { schema: {} } } }, 'response_format.json_schema.name'],
    [{ response_format: { type: 'yaml' } }, 'response_format.type'],
    [{ reasoning_budget_tokens: 3 }, 'reasoning_budget_tokens'],
    [{ response_format: { type: 'json_object' }, reasoning_budget_tokens: -2 }, 'reasoning_budget_tokens'],
  ];
  for (const [extra, param] of bad)
    await assert.rejects(client.chat.completions.create({ model: 'tiny-moe-pystd', messages: MESSAGES, ...extra }),
      (e) => e.status === 400 && e.param === param, JSON.stringify(extra));
  const ok = await client.chat.completions.create({ model: 'tiny-moe-pystd', messages: MESSAGES, max_tokens: 2, response_format: { type: 'text' } });
  assert.equal(ok.usage.completion_tokens, 2);
});

test('ChatML (Qwen3 fixture): the answer after the optional <think> block parses and validates', async () => {
  const s = await startServer(QWEN3, ['-c', '4096']);
  try {
    const qc = new OpenAI({ baseURL: `${s.baseURL}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
    for (const name of ['person', 'mixed'])
      for (const [sampling, budget, kwargs] of [[{ temperature: 0 }, 0, {}], [{ temperature: 1, seed: 4 }, 5, {}],
        [{ temperature: 1, seed: 5 }, 5, { enable_thinking: false }]]) {
        const r = await qc.chat.completions.create({ ...chatReq(name, sampling, { reasoning_budget_tokens: budget }),
          model: 'tiny-qwen3moe-q8', chat_template_kwargs: kwargs });
        const what = `qwen3 ${name} ${JSON.stringify(sampling)} budget ${budget}`;
        assert.equal(r.choices[0].finish_reason, 'stop', what);
        assertValid(r.choices[0].message.content, name, what);
        // A random-weight model rarely chooses to think; when it did, at most the budget was spent there.
        assert.ok(r.usage.completion_tokens <= MAX_TOKENS, what);
      }
  } finally {
    assert.equal(await s.stop(), 0);
  }
});
