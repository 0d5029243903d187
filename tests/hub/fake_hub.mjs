// A local stand-in for the Hugging Face Hub, on 127.0.0.1 (any free port): the endpoints nitro's
// client and @huggingface/hub call, answered the way huggingface.co answers them.
//   GET  /api/models/O/N/revision/main          {id, sha, siblings}; unknown or private repo: 401
//                                                (404 with a token) and X-Error-Code: RepoNotFound
//   GET  /api/models/O/N/tree/REV?recursive=... entries {type, oid, size, path, lfs: {oid, size,
//                                                pointerSize}}, `pageSize` per page, Link: rel="next"
//   POST /api/models/O/N/paths-info/REV         entries with lastCommit (@huggingface/hub)
//   GET/HEAD /O/N/resolve/REV/PATH               302 to /cdn/SHA256 with X-Repo-Commit, X-Linked-Etag,
//                                                X-Linked-Size; a gated repo without the token: 401/403
//                                                X-Error-Code: GatedRepo; no such file: 404 EntryNotFound
//   GET  /cdn/SHA256                              the bytes, with Range (206 + Content-Range)
// Faults a test can arm: `cut` (close the connection after N body bytes, K times), `stall` (send N
// bytes, then wait for a promise before the rest; once), `throttle` (bytes per second). Every request is
// logged in `requests` ({method, url, range, auth}).
import { createHash } from 'node:crypto';
import http from 'node:http';

const sha256 = (buf) => createHash('sha256').update(buf).digest('hex');
const gitOid = (buf) => createHash('sha1').update(`blob ${buf.length}\0`).update(buf).digest('hex');

export class FakeHub {
  constructor() {
    this.repos = new Map();  // "o/n" -> {commit, files: Map(path -> {content, sha, lfs}), gated, private}
    this.token = 'hf_testtoken0123456789abcdefghijklmnopqrst';
    this.pageSize = 3;
    this.requests = [];
    this.cut = null;       // {after: bytes, times: n}
    this.stall = null;     // {after: bytes, release: Promise, onReached(): called when it holds}
    this.throttle = 0;     // bytes per second (0 = no limit)
    this.sockets = new Set();
  }

  /** Adds a repository: files is {path: Buffer}; opts {gated, private, badSha: [paths], commit}. */
  addRepo(id, files, opts = {}) {
    const commit = opts.commit ?? createHash('sha1').update(id).digest('hex');
    const map = new Map();
    for (const [path, content] of Object.entries(files)) {
      const lfs = path.endsWith('.gguf');  // the Hub keeps large binaries in LFS
      let sha = sha256(content);
      if ((opts.badSha ?? []).includes(path)) sha = sha256(Buffer.concat([content, Buffer.from('x')]));
      map.set(path, { content, sha, lfs, oid: gitOid(content) });
    }
    this.repos.set(id, { commit, files: map, gated: !!opts.gated, private: !!opts.private });
  }

  async start() {
    this.server = http.createServer((req, res) => this.handle(req, res).catch((e) => {
      res.writeHead(500);
      res.end(String(e));
    }));
    this.server.on('connection', (s) => { this.sockets.add(s); s.on('close', () => this.sockets.delete(s)); });
    await new Promise((r) => this.server.listen(0, '127.0.0.1', r));
    this.url = `http://127.0.0.1:${this.server.address().port}`;
    return this;
  }

  async stop() {
    for (const s of this.sockets) s.destroy();
    await new Promise((r) => this.server.close(r));
  }

  authorized(req) { return req.headers.authorization === `Bearer ${this.token}`; }

  fileRequests() { return this.requests.filter((r) => r.url.startsWith('/cdn/') && r.method === 'GET'); }

  error(res, status, code, message) {
    res.writeHead(status, { 'Content-Type': 'application/json', 'X-Error-Code': code, 'X-Error-Message': message });
    res.end(JSON.stringify({ error: message }));
  }

  treeEntries(repo) {
    const entries = [];
    const dirs = new Set();
    for (const [path, f] of [...repo.files].sort(([a], [b]) => a.localeCompare(b))) {
      const parts = path.split('/');
      for (let i = 1; i < parts.length; i++) {
        const d = parts.slice(0, i).join('/');
        if (!dirs.has(d)) { dirs.add(d); entries.push({ type: 'directory', oid: gitOid(Buffer.from(d)), size: 0, path: d }); }
      }
      const e = { type: 'file', oid: f.oid, size: f.content.length, path };
      if (f.lfs) e.lfs = { oid: f.sha, size: f.content.length, pointerSize: 134 };
      entries.push(e);
    }
    return entries;
  }

  async handle(req, res) {
    const url = new URL(req.url, this.url);
    this.requests.push({ method: req.method, url: req.url, range: req.headers.range ?? null, auth: req.headers.authorization ?? null });
    let m;
    if ((m = url.pathname.match(/^\/api\/models\/([^/]+\/[^/]+)\/(revision|tree|paths-info)\/([^/]+)$/))) {
      const [, id, kind, rev] = m;
      const repo = this.repos.get(id);
      if (!repo || (repo.private && !this.authorized(req)))
        return this.error(res, req.headers.authorization ? 404 : 401, 'RepoNotFound', 'Repository not found');
      if (rev !== 'main' && rev !== repo.commit) return this.error(res, 404, 'RevisionNotFound', 'Invalid rev id');
      res.setHeader('Content-Type', 'application/json');
      if (kind === 'revision') {
        return res.end(JSON.stringify({ id, sha: repo.commit, gated: repo.gated ? 'manual' : false,
                                        siblings: [...repo.files.keys()].map((p) => ({ rfilename: p })) }));
      }
      const entries = this.treeEntries(repo);
      if (kind === 'paths-info') {
        const body = JSON.parse(await readBody(req));
        const out = entries.filter((e) => body.paths.includes(e.path))
          .map((e) => ({ ...e, lastCommit: { id: repo.commit, title: 'upload', date: '2025-01-01T00:00:00.000Z' } }));
        return res.end(JSON.stringify(out));
      }
      const cursor = Number(url.searchParams.get('cursor') ?? 0);
      const page = entries.slice(cursor, cursor + this.pageSize);
      if (cursor + this.pageSize < entries.length) {
        const next = new URL(url);
        next.searchParams.set('cursor', String(cursor + this.pageSize));
        res.setHeader('Link', `<${next.href}>; rel="next"`);
      }
      return res.end(JSON.stringify(page));
    }
    if ((m = url.pathname.match(/^\/([^/]+\/[^/]+)\/resolve\/([^/]+)\/(.+)$/))) {
      const [, id, rev, rawPath] = m;
      const path = decodeURIComponent(rawPath);
      const repo = this.repos.get(id);
      if (!repo || (repo.private && !this.authorized(req)))
        return this.error(res, 401, 'RepoNotFound', 'Repository not found');
      if (repo.gated && !this.authorized(req))
        return this.error(res, req.headers.authorization ? 403 : 401, 'GatedRepo',
                          `Access to model ${id} is restricted. You must have access to it and be authenticated to access it.`);
      const f = repo.files.get(path);
      if (!f || (rev !== 'main' && rev !== repo.commit)) return this.error(res, 404, 'EntryNotFound', 'Entry not found');
      res.writeHead(302, { Location: `/cdn/${f.sha}?repo=${encodeURIComponent(id)}&file=${encodeURIComponent(path)}`,
                           'X-Repo-Commit': repo.commit, 'X-Linked-Etag': `"${f.lfs ? f.sha : f.oid}"`,
                           'X-Linked-Size': String(f.content.length), ETag: `"${f.oid}"` });
      return res.end();
    }
    if ((m = url.pathname.match(/^\/cdn\/([0-9a-f]{64})$/))) {
      const repo = this.repos.get(url.searchParams.get('repo') ?? '');
      const f = repo?.files.get(url.searchParams.get('file') ?? '');
      if (!f) { res.writeHead(404); return res.end(); }
      return this.sendFile(req, res, f.content);
    }
    res.writeHead(404, { 'Content-Type': 'application/json' });
    res.end(JSON.stringify({ error: `no route ${req.method} ${url.pathname}` }));
  }

  async sendFile(req, res, content) {
    let start = 0, end = content.length - 1;
    const r = (req.headers.range ?? '').match(/^bytes=(\d+)-(\d*)$/);
    if (r) {
      start = Number(r[1]);
      if (r[2]) end = Math.min(end, Number(r[2]));
      if (start > end) {
        res.writeHead(416, { 'Content-Range': `bytes */${content.length}` });
        return res.end();
      }
      res.writeHead(206, { 'Content-Range': `bytes ${start}-${end}/${content.length}`, 'Content-Length': end - start + 1,
                           'Accept-Ranges': 'bytes', ETag: `"${sha256(content)}"` });
    } else {
      res.writeHead(200, { 'Content-Length': content.length, 'Accept-Ranges': 'bytes', ETag: `"${sha256(content)}"` });
    }
    if (req.method === 'HEAD') return res.end();
    const body = content.subarray(start, end + 1);
    let cutAt = Infinity;
    if (this.cut && this.cut.times > 0) { this.cut.times--; cutAt = this.cut.after; }
    const stall = this.stall;
    const chunk = 64 * 1024;  // cut and stall points are taken at these boundaries
    for (let at = 0; at < body.length; at += chunk) {
      if (at >= cutAt) {
        res.socket?.destroy();  // the connection breaks off mid-file
        return;
      }
      if (stall && at >= stall.after && !stall.reached) {
        stall.reached = true;
        stall.onReached?.();
        await stall.release;
        if (res.socket?.destroyed) return;
      }
      const piece = body.subarray(at, Math.min(body.length, at + chunk));
      if (!res.write(piece)) await new Promise((ok) => res.once('drain', ok));
      if (this.throttle) await new Promise((ok) => setTimeout(ok, (1000 * piece.length) / this.throttle));
    }
    res.end();
  }
}

function readBody(req) {
  return new Promise((resolve, reject) => {
    let s = '';
    req.on('data', (d) => { s += d; });
    req.on('end', () => resolve(s));
    req.on('error', reject);
  });
}
