// Shared helpers of the client tests: start `nitro serve` on 127.0.0.1 (any free port) with a
// fixture model, stop it, read /metrics, and run the nitro CLI for reference outputs.
import { spawn, execFileSync } from 'node:child_process';
import net from 'node:net';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export const NITRO = process.env.NITRO_BINARY ?? new URL('../../build/nitro', import.meta.url).pathname;
export const SHARED = process.env.NITRO_SHARED_DIR ?? new URL('../../../shared', import.meta.url).pathname;
export const GPTOSS = join(SHARED, 'fixtures/tiny-gptoss-mxfp4.gguf');
export const QWEN3 = join(SHARED, 'fixtures/tiny-qwen3moe-q8.gguf');
export const DATE = '2025-06-01';
export const API_KEY = 'test-key-123';

/** Starts a server; resolves when it listens. `extra` are more CLI arguments. */
export async function startServer(model, extra = [], env = {}) {
  const args = ['serve', '-m', model, '--host', '127.0.0.1', '--port', '0', '-t', '2', '--chat-date', DATE, ...extra];
  const proc = spawn(NITRO, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server did not start in 30 s:\n${log}`)), 30000);
    proc.stderr.on('data', (d) => {
      log += d.toString();
      const m = log.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m) { clearTimeout(timer); resolve(Number(m[1])); }
    });
    proc.on('exit', (code) => { clearTimeout(timer); reject(new Error(`server exited with ${code}:\n${log}`)); });
  });
  const baseURL = `http://127.0.0.1:${port}`;
  return {
    port, baseURL, proc,
    log: () => log,
    async stop() {
      if (proc.exitCode !== null) return proc.exitCode;
      const exited = new Promise((r) => proc.once('exit', (code, sig) => r(code ?? sig)));
      proc.kill('SIGTERM');
      const t = setTimeout(() => proc.kill('SIGKILL'), 10000);
      const code = await exited;
      clearTimeout(t);
      return code;
    },
  };
}

/** /metrics as {"name{labels}": value}. */
export async function metrics(baseURL, headers = {}) {
  const text = await (await fetch(`${baseURL}/metrics`, { headers })).text();
  const out = {};
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const i = line.lastIndexOf(' ');
    out[line.slice(0, i)] = Number(line.slice(i + 1));
  }
  return out;
}

/** `nitro tokenize --chat` of a conversation: {rendered, ids}. */
export function renderChat(model, messages, tools, kwargs = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'nitro-chat-'));
  const file = join(dir, 'conv.json');
  try {
    writeFileSync(file, JSON.stringify({ messages, ...(tools ? { tools } : {}), kwargs: { date: DATE, ...kwargs } }));
    return JSON.parse(execFileSync(NITRO, ['tokenize', '-m', model, '--chat', file, '--json']).toString());
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** `nitro run` greedy from token ids: {ids, text, stop_reason}. */
export function runGreedy(model, ids, n) {
  return JSON.parse(execFileSync(NITRO, ['run', '-m', model, '--prompt-ids', ids.join(','), '-n', String(n),
    '--temp', '0', '-t', '2', '--json']).toString());
}

/** Collects a chat stream (OpenAI SDK async iterator) the way a client merges deltas. */
export async function collectChatStream(stream) {
  const out = { content: '', reasoning: '', toolCalls: [], toolDeltas: [], finish: null, usage: null, chunks: 0, roleFirst: null };
  for await (const chunk of stream) {
    out.chunks++;
    if (chunk.usage) out.usage = chunk.usage;
    const ch = chunk.choices[0];
    if (!ch) continue;
    if (out.roleFirst === null) out.roleFirst = ch.delta.role ?? '';
    if (ch.finish_reason) out.finish = ch.finish_reason;
    if (ch.delta.content) out.content += ch.delta.content;
    if (ch.delta.reasoning_content) out.reasoning += ch.delta.reasoning_content;
    for (const t of ch.delta.tool_calls ?? []) {
      out.toolDeltas.push(t);
      const c = (out.toolCalls[t.index] ??= { id: '', name: '', arguments: '' });
      if (t.id) c.id = t.id;
      if (t.function?.name) c.name = t.function.name;
      if (t.function?.arguments) c.arguments += t.function.arguments;
    }
  }
  return out;
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Parses the HTTP/1.1 responses in `buf` (Content-Length or chunked bodies). */
export function parseResponses(buf) {
  const out = [];
  let s = buf.toString('latin1');
  while (s.startsWith('HTTP/1.1 ')) {
    const end = s.indexOf('\r\n\r\n');
    if (end < 0) break;
    const lines = s.slice(0, end).split('\r\n');
    const status = Number(lines[0].split(' ')[1]);
    const headers = {};
    for (const l of lines.slice(1)) { const i = l.indexOf(':'); headers[l.slice(0, i).toLowerCase()] = l.slice(i + 1).trim(); }
    s = s.slice(end + 4);
    let body = '';
    if (status >= 100 && status < 200) { out.push({ status, headers, body }); continue; }
    if (headers['transfer-encoding'] === 'chunked') {
      for (;;) {
        const le = s.indexOf('\r\n');
        if (le < 0) break;
        const n = parseInt(s.slice(0, le), 16);
        body += s.slice(le + 2, le + 2 + n);
        s = s.slice(le + 2 + n + 2);
        if (n === 0) break;
      }
    } else {
      const n = Number(headers['content-length'] ?? 0);
      body = s.slice(0, n);
      s = s.slice(n);
    }
    out.push({ status, headers, body: Buffer.from(body, 'latin1').toString('utf8') });
  }
  return { responses: out, rest: s };
}

/** Opens a socket, runs `script(sock, received)` and returns the responses read until the
 *  server closes or `idleMs` passes without data. */
export async function raw(port, script, idleMs = 1500) {
  const sock = net.connect(port, '127.0.0.1');
  await new Promise((r, j) => { sock.once('connect', r); sock.once('error', j); });
  const chunks = [];
  let closed = false;
  let last = Date.now();
  sock.on('data', (d) => { chunks.push(d); last = Date.now(); });
  sock.on('close', () => { closed = true; });
  sock.on('error', () => {});
  await script(sock, () => parseResponses(Buffer.concat(chunks)).responses);
  while (!closed && Date.now() - last < idleMs) await sleep(20);
  sock.destroy();
  return { ...parseResponses(Buffer.concat(chunks)), closed };
}
