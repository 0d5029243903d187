// `nitro pull` and `-hf` end to end against a local stand-in for the Hugging Face Hub (fake_hub.mjs,
// no network): the download into huggingface_hub's cache layout (read back by @huggingface/hub, the
// official JS client), the quant choice, resume after a cut connection and after a killed process,
// the SHA-256 check, 401/403/404 answers, a split model, offline use, a shared download, the
// progress bar, and `nitro run -hf` running what it downloaded.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, readlinkSync, rmSync, statSync, writeFileSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { downloadFileToCacheDir, scanCacheDir } from '@huggingface/hub';
import { FakeHub } from './fake_hub.mjs';
import { splitGguf } from './gguf_split.mjs';

const ROOT = new URL('../..', import.meta.url).pathname;
const NITRO = process.env.NITRO_BINARY ?? join(ROOT, 'build/nitro');
const MODEL_PATH = join(ROOT, 'models/tiny-moe-pystd.gguf');
const MODEL = readFileSync(MODEL_PATH);
// The digest models/README.md states for the embedded model: the reference a download must match.
const MODEL_SHA = readFileSync(join(ROOT, 'models/README.md'), 'utf8').match(/\| sha256 \| `([0-9a-f]{64})`/)[1];
const GOLDEN = JSON.parse(readFileSync(join(ROOT, 'tests/golden/embedded_model.json'), 'utf8')).cases[0];
const MiB = 1 << 20;

const sha256 = (buf) => createHash('sha256').update(buf).digest('hex');
const junk = (n, seed) => { const b = Buffer.alloc(n); for (let i = 0; i < n; i++) b[i] = (i * 131 + seed * 7 + (i >> 9)) & 255; return b; };
const dirs = [];
const freshDir = () => { const d = mkdtempSync(join(tmpdir(), 'nitro-hub-')); dirs.push(d); return d; };

const hub = new FakeHub();

/** Runs nitro with a clean Hugging Face environment plus `env`; resolves {code, stdout, stderr}. */
function nitro(args, env = {}, { onStderr } = {}) {
  const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('HF_') && !k.startsWith('HUGGING') && k !== 'NITRO_MODEL'));
  const proc = spawn(NITRO, args, { env: { ...base, HF_ENDPOINT: hub.url, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '', stderr = '';
  proc.stdout.on('data', (d) => { stdout += d; });
  proc.stderr.on('data', (d) => { stderr += d; onStderr?.(stderr); });
  const done = new Promise((resolve) => proc.on('close', (code, signal) => resolve({ code, signal, stdout, stderr })));
  done.proc = proc;
  return done;
}

const repoDir = (home, repo) => join(home, 'hub', `models--${repo.replace('/', '--')}`);
const commitOf = (repo) => hub.repos.get(repo).commit;
const cdnGets = () => hub.fileRequests().length;

async function waitFor(cond, what, ms = 20000) {
  const t0 = Date.now();
  while (!cond()) {
    if (Date.now() - t0 > ms) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

before(async () => {
  await hub.start();
  hub.addRepo('test-org/tiny-moe-GGUF', {
    'README.md': Buffer.from('# tiny-moe-pystd\n'),
    'mmproj-tiny-moe-F16.gguf': junk(4096, 1),
    'tiny-moe-pystd-MXFP4.gguf': MODEL,
    'tiny-moe-pystd-Q2_K.gguf': junk(70000, 2),
  });
  const shards = splitGguf(MODEL, 'Q8_0/tiny-moe-pystd-Q8_0', 2);
  hub.addRepo('test-org/tiny-moe-split-GGUF', Object.fromEntries(shards.map((s) => [s.name, s.content])));
  hub.addRepo('test-org/gated-GGUF', { 'tiny-moe-pystd-MXFP4.gguf': MODEL }, { gated: true });
  hub.addRepo('test-org/private-GGUF', { 'tiny-moe-pystd-MXFP4.gguf': MODEL }, { private: true });
  hub.addRepo('test-org/bad-sha-GGUF', { 'model-Q4_K_M.gguf': junk(300000, 3) }, { badSha: ['model-Q4_K_M.gguf'] });
  hub.addRepo('test-org/safetensors-only', { 'config.json': Buffer.from('{}'), 'model.safetensors': junk(1000, 4) });
  hub.addRepo('test-org/slow-GGUF', { 'slow-Q4_K_M.gguf': junk(3 * MiB, 5) });
});

after(async () => {
  await hub.stop();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

describe('nitro pull', () => {
  test('downloads the quant into the huggingface_hub cache layout, then finds it there', async () => {
    const home = freshDir();
    const repo = 'test-org/tiny-moe-GGUF', commit = commitOf(repo);
    const before = cdnGets();
    const r = await nitro(['pull', `${repo}:mxfp4`], { HF_HOME: home });
    assert.equal(r.code, 0, r.stderr);
    const path = r.stdout.trim();
    const snap = join(repoDir(home, repo), 'snapshots', commit, 'tiny-moe-pystd-MXFP4.gguf');
    assert.equal(path, snap);
    assert.equal(readlinkSync(path), `../../blobs/${MODEL_SHA}`);  // relative link, as huggingface_hub makes it
    assert.equal(sha256(readFileSync(path)), MODEL_SHA);
    assert.equal(readFileSync(join(repoDir(home, repo), 'refs/main'), 'utf8'), commit);
    assert.equal(existsSync(join(repoDir(home, repo), 'blobs', `${MODEL_SHA}.incomplete`)), false);
    assert.equal(cdnGets() - before, 1);
    // the tree listing came in pages (3 entries each) joined through the Link header
    assert.ok(hub.requests.some((q) => q.url.includes('/tree/') && q.url.includes('cursor=3')));

    // The official JS client reads the cache nitro wrote: one repo, its main ref, the file's blob.
    const scan = await scanCacheDir(join(home, 'hub'));
    assert.equal(scan.warnings.length, 0, String(scan.warnings));
    const cached = scan.repos.find((x) => x.id.name === repo);
    assert.ok(cached, JSON.stringify(scan.repos.map((x) => x.id)));
    assert.equal(cached.revisions.length, 1);
    assert.equal(cached.revisions[0].commitOid, commit);
    assert.deepEqual(cached.revisions[0].refs, ['main']);
    assert.equal(cached.revisions[0].files[0].blob.size, MODEL.length);

    // Again: nothing downloaded. Without a quant, llama.cpp's order (Q4_K_M, Q8_0, then the first
    // model GGUF, leaving out mmproj) picks the same file.
    const again = await nitro(['pull', repo], { HF_HOME: home });
    assert.equal(again.code, 0, again.stderr);
    assert.equal(again.stdout.trim(), snap);
    assert.match(again.stderr, /already in the cache/);
    assert.equal(cdnGets() - before, 1);

    const json = await nitro(['pull', `${repo}:tiny-moe-pystd-MXFP4.gguf`, '--json'], { HF_HOME: home });
    assert.equal(json.code, 0, json.stderr);
    assert.deepEqual(JSON.parse(json.stdout), { path: snap, files: ['tiny-moe-pystd-MXFP4.gguf'], commit, bytes: MODEL.length,
                                                downloaded: 0, offline: false });
  });

  test('run -hf runs the downloaded model; serve -hf serves it; plan -hf plans it; -m with -hf is refused', async () => {
    const home = freshDir();
    const args = ['--json', '--prompt-ids', GOLDEN.prompt_ids.join(','), '-n', '4', '--temp', '0', '-t', '2', '--mode', 'cpu'];
    const viaHf = await nitro(['run', '-hf', 'test-org/tiny-moe-GGUF:MXFP4', ...args], { HF_HOME: home });
    assert.equal(viaHf.code, 0, viaHf.stderr);
    const local = await nitro(['run', '-m', MODEL_PATH, ...args]);
    assert.equal(local.code, 0, local.stderr);
    const ids = JSON.parse(viaHf.stdout).ids;
    assert.deepEqual(ids, JSON.parse(local.stdout).ids);
    assert.equal(ids[0], GOLDEN.greedy_ids[0]);  // transformers' first greedy token (a decisive step)
    assert.match(viaHf.stderr, /model: .*tiny-moe-pystd-MXFP4\.gguf \(28\.07 MiB, downloaded\)/);

    const plan = await nitro(['plan', '-hf', 'test-org/tiny-moe-GGUF:MXFP4', '--vram-budget', '1'], { HF_HOME: home });
    assert.equal(plan.code, 0, plan.stderr);
    assert.match(plan.stdout, /64 experts, 4 used per token/);
    assert.match(plan.stderr, /\(28\.07 MiB, cached\)/);

    // serve -hf: the server answers with the model from the cache, named after its file
    let port = null;
    const serve = nitro(['serve', '-hf', 'test-org/tiny-moe-GGUF:MXFP4', '--host', '127.0.0.1', '--port', '0', '-t', '2', '--mode', 'cpu'],
                        { HF_HOME: home }, { onStderr: (s) => { port = s.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/)?.[1] ?? null; } });
    await waitFor(() => port, 'nitro serve -hf to listen');
    const models = await (await fetch(`http://127.0.0.1:${port}/v1/models`)).json();
    serve.proc.kill('SIGTERM');
    const served = await serve;
    assert.equal(served.code, 0, served.stderr);
    assert.deepEqual(models.data.map((m) => m.id), ['tiny-moe-pystd-MXFP4']);
    assert.match(served.stderr, /model: .*snapshots\/[0-9a-f]{40}\/tiny-moe-pystd-MXFP4\.gguf \(28\.07 MiB, cached\)/);

    const both = await nitro(['run', '-m', MODEL_PATH, '-hf', 'test-org/tiny-moe-GGUF', '-n', '1', '-p', 'x'], { HF_HOME: home });
    assert.equal(both.code, 1);
    assert.match(both.stderr, /error: -m .* and -hf test-org\/tiny-moe-GGUF name two models: give one of them/);
  });

  test('a split model: every shard, and it runs', async () => {
    const home = freshDir();
    const repo = 'test-org/tiny-moe-split-GGUF';
    const before = cdnGets();
    const r = await nitro(['pull', `${repo}:q8_0`], { HF_HOME: home });
    assert.equal(r.code, 0, r.stderr);
    assert.equal(cdnGets() - before, 2);
    const snap = join(repoDir(home, repo), 'snapshots', commitOf(repo), 'Q8_0');
    assert.equal(r.stdout.trim(), join(snap, 'tiny-moe-pystd-Q8_0-00001-of-00002.gguf'));
    assert.ok(existsSync(join(snap, 'tiny-moe-pystd-Q8_0-00002-of-00002.gguf')));
    assert.match(r.stderr, /: 2 files, 28\.07 MiB \(downloaded 28\.07 MiB\)/);

    const args = ['--json', '--prompt-ids', GOLDEN.prompt_ids.join(','), '-n', '4', '--temp', '0', '-t', '2', '--mode', 'cpu'];
    const split = await nitro(['run', '-hf', `${repo}:Q8_0`, ...args], { HF_HOME: home });
    assert.equal(split.code, 0, split.stderr);
    const local = await nitro(['run', '-m', MODEL_PATH, ...args]);
    assert.deepEqual(JSON.parse(split.stdout).ids, JSON.parse(local.stdout).ids);
  });

  test('a connection cut mid-file is resumed with a Range request', async () => {
    const home = freshDir();
    hub.cut = { after: MiB, times: 1 };
    const before = hub.fileRequests().length;
    const r = await nitro(['pull', 'test-org/tiny-moe-GGUF:MXFP4'], { HF_HOME: home });
    hub.cut = null;
    assert.equal(r.code, 0, r.stderr);
    const gets = hub.fileRequests().slice(before);
    assert.equal(gets.length, 2);
    assert.equal(gets[0].range, null);
    const from = Number(gets[1].range.match(/^bytes=(\d+)-$/)[1]);
    assert.ok(from > 0 && from <= MiB, gets[1].range);
    assert.match(r.stderr, /connection lost at .* of 28\.07 MiB .*resuming in 1 s \(retry 1 of 5\)/);
    assert.match(r.stderr, /tiny-moe-pystd-MXFP4\.gguf: 28\.07 MiB in [\d.]+ s \([\d.]+ MiB\/s\)/);
    assert.equal(sha256(readFileSync(r.stdout.trim())), MODEL_SHA);
  });

  test('a download killed midway is resumed by the next run from the partial file', async () => {
    const home = freshDir();
    let release;
    hub.stall = { after: 4 * MiB, release: new Promise((r) => { release = r; }) };
    const part = join(repoDir(home, 'test-org/tiny-moe-GGUF'), 'blobs', `${MODEL_SHA}.incomplete`);
    const first = nitro(['pull', 'test-org/tiny-moe-GGUF:MXFP4'], { HF_HOME: home });
    await waitFor(() => hub.stall.reached && existsSync(part) && statSync(part).size >= 2 * MiB, 'the partial file');
    first.proc.kill('SIGKILL');
    const killed = await first;
    assert.equal(killed.signal, 'SIGKILL');
    const have = statSync(part).size;
    release();
    hub.stall = null;

    const before = hub.fileRequests().length;
    const r = await nitro(['pull', 'test-org/tiny-moe-GGUF:MXFP4'], { HF_HOME: home });
    assert.equal(r.code, 0, r.stderr);
    const gets = hub.fileRequests().slice(before);
    assert.equal(gets.length, 1);
    assert.equal(gets[0].range, `bytes=${have}-`);
    assert.match(r.stderr, /resuming at .* of 28\.07 MiB/);
    assert.equal(sha256(readFileSync(r.stdout.trim())), MODEL_SHA);
    assert.equal(existsSync(part), false);
  });

  test('a checksum mismatch is refused and the partial file removed', async () => {
    const home = freshDir();
    const repo = 'test-org/bad-sha-GGUF';
    const listed = hub.repos.get(repo).files.get('model-Q4_K_M.gguf').sha;
    const r = await nitro(['pull', repo], { HF_HOME: home });
    assert.equal(r.code, 1);
    assert.match(r.stderr, new RegExp(`error: ${repo}: the SHA-256 of the downloaded model-Q4_K_M\\.gguf is [0-9a-f]{64}, but the Hub lists ${listed}`));
    const blobs = join(repoDir(home, repo), 'blobs');
    assert.equal(existsSync(join(blobs, listed)), false);
    assert.equal(existsSync(join(blobs, `${listed}.incomplete`)), false);
    assert.equal(existsSync(join(repoDir(home, repo), 'snapshots', commitOf(repo), 'model-Q4_K_M.gguf')), false);
  });

  test('an unknown repository, quant or file names what there is', async () => {
    const home = freshDir();
    const cases = [
      [['pull', 'test-org/nope-GGUF'], /error: test-org\/nope-GGUF: no such repository on http:\/\/127\.0\.0\.1:\d+ \(HTTP 401 RepoNotFound: Repository not found\): check the name at .*; a private or gated repository also needs HF_TOKEN \(no token is set\)/],
      [['pull', 'test-org/tiny-moe-GGUF:Q5_K_S'], /error: test-org\/tiny-moe-GGUF has no GGUF file for quant 'Q5_K_S'; its quants: MXFP4, Q2_K \(e\.g\. test-org\/tiny-moe-GGUF:MXFP4\); its GGUF files: mmproj-tiny-moe-F16\.gguf, tiny-moe-pystd-MXFP4\.gguf, tiny-moe-pystd-Q2_K\.gguf/],
      [['pull', 'test-org/tiny-moe-GGUF:other.gguf'], /error: test-org\/tiny-moe-GGUF has no file 'other\.gguf'; its GGUF files: /],
      [['pull', 'test-org/safetensors-only'], /error: test-org\/safetensors-only has no GGUF model file .*; its files: config\.json, model\.safetensors/],
      [['pull', 'just-a-name'], /error: 'just-a-name' is not a Hugging Face repository: expected OWNER\/NAME\[:QUANT\]/],
      [['run', '-hf', 'test-org/tiny-moe-GGUF:Q5_K_S', '-n', '1', '-p', 'x'], /has no GGUF file for quant 'Q5_K_S'/],
    ];
    for (const [args, re] of cases) {
      const r = await nitro(args, { HF_HOME: home });
      assert.equal(r.code, 1, `${args.join(' ')}\n${r.stderr}`);
      assert.match(r.stderr, re, args.join(' '));
    }
  });

  test('gated and private repositories need HF_TOKEN (or HF_HOME/token)', async () => {
    const home = freshDir();
    const gated = 'test-org/gated-GGUF';
    let r = await nitro(['pull', gated], { HF_HOME: home });
    assert.equal(r.code, 1);
    assert.match(r.stderr, /error: test-org\/gated-GGUF: cannot download the file tiny-moe-pystd-MXFP4\.gguf \(HTTP 401 GatedRepo: Access to model test-org\/gated-GGUF is restricted.*\): the repository is gated; accept its license at http:\/\/127\.0\.0\.1:\d+\/test-org\/gated-GGUF while logged in to Hugging Face, and set HF_TOKEN to an access token of that account \(no token is set\)/);
    r = await nitro(['pull', gated], { HF_HOME: home, HF_TOKEN: 'hf_not_the_right_one' });
    assert.equal(r.code, 1);
    assert.match(r.stderr, /HTTP 403 GatedRepo.*\(the token from HF_TOKEN was sent\)/);
    r = await nitro(['pull', 'test-org/private-GGUF'], { HF_HOME: home });
    assert.equal(r.code, 1);
    assert.match(r.stderr, /no such repository .*a private or gated repository also needs HF_TOKEN \(no token is set\)/);

    const before = hub.requests.length;
    r = await nitro(['pull', gated], { HF_HOME: home, HF_TOKEN: hub.token });
    assert.equal(r.code, 0, r.stderr);
    const sent = hub.requests.slice(before).filter((q) => !q.url.startsWith('/cdn/'));
    assert.ok(sent.length >= 3 && sent.every((q) => q.auth === `Bearer ${hub.token}`), JSON.stringify(sent));

    const home2 = freshDir();
    mkdirSync(home2, { recursive: true });
    writeFileSync(join(home2, 'token'), `${hub.token}\n`);  // what `huggingface-cli login` stores
    r = await nitro(['pull', 'test-org/private-GGUF'], { HF_HOME: home2 });
    assert.equal(r.code, 0, r.stderr);
    assert.equal(sha256(readFileSync(r.stdout.trim())), MODEL_SHA);
  });

  test('offline: HF_HUB_OFFLINE=1 or an unreachable Hub uses the cache', async () => {
    const home = freshDir();
    const repo = 'test-org/tiny-moe-GGUF';
    const first = await nitro(['pull', `${repo}:MXFP4`], { HF_HOME: home });
    assert.equal(first.code, 0, first.stderr);
    const path = first.stdout.trim();

    const before = hub.requests.length;
    let r = await nitro(['pull', repo], { HF_HOME: home, HF_HUB_OFFLINE: '1' });
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout.trim(), path);
    assert.match(r.stderr, /HF_HUB_OFFLINE is set: using the cached tiny-moe-pystd-MXFP4\.gguf \(28\.07 MiB\)/);
    assert.equal(hub.requests.length, before);  // not one request

    // a Hub that cannot be reached: a port nothing listens on
    const closed = new FakeHub();
    await closed.start();
    const deadUrl = closed.url;
    await closed.stop();
    r = await nitro(['run', '-hf', repo, '-n', '2', '-p', 'def f', '--mode', 'cpu', '-t', '2'], { HF_HOME: home, HF_ENDPOINT: deadUrl });
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stderr, /cannot reach the Hub \(GET .*: .*\): using the cached tiny-moe-pystd-MXFP4\.gguf/);
    assert.match(r.stderr, /\(28\.07 MiB, cached; offline\)/);

    r = await nitro(['pull', 'test-org/gated-GGUF'], { HF_HOME: home, HF_HUB_OFFLINE: '1' });
    assert.equal(r.code, 1);
    assert.match(r.stderr, /error: HF_HUB_OFFLINE is set, and test-org\/gated-GGUF is not in the Hugging Face cache \(.*\): run `nitro pull test-org\/gated-GGUF` where the Hub can be reached/);
  });

  test('the cache is shared with @huggingface/hub, both ways', async () => {
    const repo = 'test-org/tiny-moe-GGUF', file = 'tiny-moe-pystd-MXFP4.gguf';
    // the official client downloads; nitro finds the file and downloads nothing
    const home = freshDir();
    const cacheDir = join(home, 'hub');
    const jsPath = await downloadFileToCacheDir({ repo, path: file, hubUrl: hub.url, cacheDir });
    let before = cdnGets();
    const r = await nitro(['pull', `${repo}:MXFP4`], { HF_HUB_CACHE: cacheDir });
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout.trim(), jsPath);
    assert.equal(cdnGets(), before);

    // nitro downloads; the official client finds the file and downloads nothing
    const home2 = freshDir();
    const n = await nitro(['pull', `${repo}:MXFP4`], { HF_HOME: home2 });
    assert.equal(n.code, 0, n.stderr);
    before = cdnGets();
    const again = await downloadFileToCacheDir({ repo, path: file, hubUrl: hub.url, cacheDir: join(home2, 'hub') });
    assert.equal(again, n.stdout.trim());
    assert.equal(cdnGets(), before);
  });

  test('two pulls of one file at once: one downloads, the other waits for it', async () => {
    const home = freshDir();
    let release;
    hub.stall = { after: MiB, release: new Promise((r) => { release = r; }) };
    const before = cdnGets();
    const a = nitro(['pull', 'test-org/tiny-moe-GGUF:MXFP4'], { HF_HOME: home });
    await waitFor(() => hub.stall.reached, 'the first download');
    let waiting = false;
    const b = nitro(['pull', 'test-org/tiny-moe-GGUF:MXFP4'], { HF_HOME: home }, { onStderr: (s) => { waiting = /waiting for another download/.test(s); } });
    await waitFor(() => waiting, 'the second pull to wait');
    release();
    const [ra, rb] = await Promise.all([a, b]);
    hub.stall = null;
    assert.equal(ra.code, 0, ra.stderr);
    assert.equal(rb.code, 0, rb.stderr);
    assert.equal(rb.stdout, ra.stdout);
    assert.equal(cdnGets() - before, 1);
  });

  test('on a terminal: a progress bar with the rate and the time left', async () => {
    const home = freshDir();
    hub.throttle = 2 * MiB;  // 3 MiB in about 1.5 s
    const env = { HF_HOME: home, HF_ENDPOINT: hub.url };
    const cmd = `${Object.entries(env).map(([k, v]) => `${k}='${v}'`).join(' ')} '${NITRO}' pull test-org/slow-GGUF`;
    const r = await new Promise((resolve) => {
      const p = spawn('script', ['-qefc', cmd, '/dev/null'], { stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      p.stdout.on('data', (d) => { out += d; });
      p.on('close', (code) => resolve({ code, out }));
    });
    hub.throttle = 0;
    assert.equal(r.code, 0, r.out);
    const frames = r.out.split('\r').filter((f) => f.startsWith('slow-Q4_K_M.gguf'));
    assert.ok(frames.length >= 3, r.out);
    assert.ok(frames.some((f) => /^slow-Q4_K_M\.gguf +\d+% \[=*>? *\] [\d.]+ (KiB|MiB) of 3\.00 MiB {2}[\d.]+ (KiB|MiB)\/s {2}[\d.]+ s left/.test(f)), r.out);
    assert.match(frames.at(-1), /100% \[={24}\] 3\.00 MiB of 3\.00 MiB {2}[\d.]+ (KiB|MiB)\/s, [\d.]+ s/);
  });
});
