// Splits a GGUF file into shards the way llama.cpp's llama-gguf-split does (tools/gguf-split):
// NAME-00001-of-0000N.gguf ... with the tensors in order, the first shard carrying every metadata
// key, each shard split.no (u16, 0-based), split.count (u16) and split.tensors.count (i32).
// Test data only: a model served by the fake Hub as a split repository.

const TYPE_SIZE = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 };

class Reader {
  constructor(buf) { this.buf = buf; this.at = 0; }
  u32() { const v = this.buf.readUInt32LE(this.at); this.at += 4; return v; }
  u64() { const v = this.buf.readBigUInt64LE(this.at); this.at += 8; return v; }
  str() { const n = Number(this.u64()); const s = this.buf.toString('utf8', this.at, this.at + n); this.at += n; return s; }
  skipValue(type) {
    if (type === 8) { this.str(); return; }
    if (type === 9) {
      const t = this.u32(), n = Number(this.u64());
      for (let i = 0; i < n; i++) this.skipValue(t);
      return;
    }
    if (!(type in TYPE_SIZE)) throw new Error(`gguf_split: unknown value type ${type}`);
    this.at += TYPE_SIZE[type];
  }
}

const u16 = (v) => { const b = Buffer.alloc(2); b.writeUInt16LE(v); return b; };
const u32 = (v) => { const b = Buffer.alloc(4); b.writeUInt32LE(v); return b; };
const i32 = (v) => { const b = Buffer.alloc(4); b.writeInt32LE(v); return b; };
const u64 = (v) => { const b = Buffer.alloc(8); b.writeBigUInt64LE(BigInt(v)); return b; };
const str = (s) => Buffer.concat([u64(Buffer.byteLength(s)), Buffer.from(s)]);
const kv = (key, type, value) => Buffer.concat([str(key), u32(type), value]);

/** Returns [{name: `${prefix}-0000i-of-0000n.gguf`, content: Buffer}] for `n` shards of `buf`. */
export function splitGguf(buf, prefix, n) {
  const r = new Reader(buf);
  if (buf.toString('latin1', 0, 4) !== 'GGUF') throw new Error('gguf_split: not a GGUF file');
  r.at = 4;
  const version = r.u32();
  const nTensors = Number(r.u64()), nKv = Number(r.u64());
  const kvs = [];
  let alignment = 32;
  for (let i = 0; i < nKv; i++) {
    const start = r.at;
    const key = r.str(), type = r.u32();
    if (key === 'general.alignment') alignment = buf.readUInt32LE(r.at);
    r.skipValue(type);
    kvs.push({ key, bytes: buf.subarray(start, r.at) });
  }
  const tensors = [];
  for (let i = 0; i < nTensors; i++) {
    const start = r.at;
    const name = r.str(), nd = r.u32();
    for (let d = 0; d < nd; d++) r.u64();
    r.u32();
    const offsetAt = r.at;
    const offset = Number(r.u64());
    tensors.push({ name, info: buf.subarray(start, offsetAt), offset });
  }
  const dataStart = Math.ceil(r.at / alignment) * alignment;
  for (let i = 0; i < tensors.length; i++) {
    const t = tensors[i];
    const end = i + 1 < tensors.length ? tensors[i + 1].offset : buf.length - dataStart;
    if (end < t.offset) throw new Error('gguf_split: tensor data out of order');
    t.data = buf.subarray(dataStart + t.offset, dataStart + end);  // with the padding to the next tensor
  }
  const per = Math.ceil(tensors.length / n);
  const shards = [];
  for (let s = 0; s < n; s++) {
    const part = tensors.slice(s * per, (s + 1) * per);
    const keys = s === 0 ? kvs.map((k) => k.bytes) : kvs.filter((k) => k.key === 'general.alignment').map((k) => k.bytes);
    keys.push(kv('split.no', 2, u16(s)), kv('split.count', 2, u16(n)), kv('split.tensors.count', 5, i32(tensors.length)));
    const infos = [];
    let offset = 0;
    for (const t of part) {
      infos.push(Buffer.concat([t.info, u64(offset)]));
      offset += t.data.length;
    }
    const head = Buffer.concat([Buffer.from('GGUF'), u32(version), u64(part.length), u64(keys.length), ...keys, ...infos]);
    const pad = Buffer.alloc(Math.ceil(head.length / alignment) * alignment - head.length);
    const name = `${prefix}-${String(s + 1).padStart(5, '0')}-of-${String(n).padStart(5, '0')}.gguf`;
    shards.push({ name, content: Buffer.concat([head, pad, ...part.map((t) => t.data)]) });
  }
  return shards;
}
