// Trains the byte-level BPE tokenizer of the embedded model and tokenizes the corpus.
//
//   node train_tokenizer.mjs            (after ./make_corpus.sh; npm ci first)
//
// Tokenizer: gpt-oss's pre-tokenizer (the o200k / gpt-4o split regex, then ByteLevel), a BPE
// model trained on the corpus' training split with Hugging Face tokenizers 0.23.2 (package.json),
// N_NORMAL normal tokens (256 byte tokens + merges), then the harmony special tokens, so the
// special ids follow the normal vocabulary as in gpt-oss. The Node binding has no BPE trainer
// options, so the default trainer runs (30000 tokens) and the first N_NORMAL - 256 merges are kept:
// BPE training is greedy, so these are exactly the merges a smaller training would learn.
//
// Writes tools/train/tokenizer.json and data/{train,heldout}.u16 (little-endian uint16 token ids,
// each document followed by <|endoftext|>), data/tokens.json (counts).
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import tokenizers from 'tokenizers';

const { Tokenizer } = tokenizers;
const here = path.dirname(fileURLToPath(import.meta.url));
const data = path.join(here, 'data');
const N_NORMAL = 8183;  // + 9 specials = 8192 tokens
const SPECIALS = ['<|startoftext|>', '<|endoftext|>', '<|return|>', '<|constrain|>', '<|channel|>',
                  '<|start|>', '<|end|>', '<|message|>', '<|call|>'];

// gpt-oss (o200k_harmony) pre-tokenizer and decoder, verbatim from its tokenizer.json.
const O200K_REGEX = "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const PRE_TOKENIZER = {
  type: 'Sequence',
  pretokenizers: [
    { type: 'Split', pattern: { Regex: O200K_REGEX }, behavior: 'Isolated', invert: false },
    { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false },
  ],
};
const DECODER = { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true };
const POST = { type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true };

function bpeJson(vocab, merges, added) {
  return {
    version: '1.0', truncation: null, padding: null, added_tokens: added, normalizer: null,
    pre_tokenizer: PRE_TOKENIZER, post_processor: POST, decoder: DECODER,
    model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null,
             end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, ignore_merges: false,
             vocab, merges },
  };
}

// GPT-2 bytes_to_unicode: the printable character that stands for each byte.
function byteChars() {
  const out = new Array(256);
  let k = 0;
  for (let b = 0; b < 256; ++b) {
    const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    out[b] = String.fromCodePoint(printable ? b : 0x100 + k++);
  }
  return out;
}

const files = fs.readFileSync(path.join(data, 'files.tsv'), 'utf8').trim().split('\n')
  .map((l) => { const [split, bytes, sha, name] = l.split('\t'); return { split, bytes: +bytes, sha, name }; });
const trainFiles = files.filter((f) => f.split === 'train').map((f) => path.join(data, 'corpus', f.name));

// 1. Train on the training split only.
const base = Tokenizer.fromString(JSON.stringify(bpeJson({}, [], [])));
base.train(trainFiles);
const trainedPath = path.join(data, 'tokenizer.full.json');
base.save(trainedPath, false);
const trained = JSON.parse(fs.readFileSync(trainedPath, 'utf8'));
const allMerges = trained.model.merges.map((m) => (Array.isArray(m) ? m : m.split(' ')));

// 2. 256 byte tokens in byte order, then the first merges in training order.
const vocab = {};
byteChars().forEach((c, b) => { vocab[c] = b; });
const merges = [];
for (const [a, b] of allMerges) {
  if (Object.keys(vocab).length >= N_NORMAL) break;
  if (!(a in vocab) || !(b in vocab)) throw new Error(`merge ${a} ${b} uses an unknown token`);
  const t = a + b;
  if (t in vocab) throw new Error(`merge ${a} ${b} repeats token ${t}`);
  vocab[t] = Object.keys(vocab).length;
  merges.push([a, b]);
}
if (Object.keys(vocab).length !== N_NORMAL) throw new Error(`only ${Object.keys(vocab).length} normal tokens`);
const added = SPECIALS.map((s, i) => ({ id: N_NORMAL + i, content: s, single_word: false, lstrip: false,
                                         rstrip: false, normalized: false, special: true }));
const outJson = JSON.stringify(bpeJson(vocab, merges, added), null, 1);
fs.writeFileSync(path.join(here, 'tokenizer.json'), outJson + '\n');
const tok = Tokenizer.fromString(outJson);
if (tok.getVocabSize(true) !== N_NORMAL + SPECIALS.length) throw new Error('vocabulary size mismatch');

// 3. Tokenize every file; each document ends with <|endoftext|>.
const eot = tok.tokenToId('<|endoftext|>');
const stats = { n_vocab: tok.getVocabSize(true), n_normal: N_NORMAL, eot, splits: {} };
for (const split of ['train', 'heldout']) {
  const chunks = [];
  let nTok = 0, nBytes = 0, nFiles = 0;
  for (const f of files.filter((x) => x.split === split)) {
    const text = fs.readFileSync(path.join(data, 'corpus', f.name), 'utf8');
    const enc = await tok.encode(text, null, { addSpecialTokens: false });
    const ids = enc.getIds();
    const dec = await tok.decode(ids, false);
    if (dec !== text) throw new Error(`${f.name}: decode(encode(text)) != text`);
    const a = new Uint16Array(ids.length + 1);
    a.set(ids);
    a[ids.length] = eot;
    chunks.push(a);
    nTok += a.length; nBytes += f.bytes; nFiles += 1;
  }
  const all = new Uint16Array(nTok);
  let o = 0;
  for (const c of chunks) { all.set(c, o); o += c.length; }
  fs.writeFileSync(path.join(data, `${split}.u16`), Buffer.from(all.buffer));
  stats.splits[split] = { files: nFiles, bytes: nBytes, tokens: nTok, bytes_per_token: nBytes / nTok };
}
fs.writeFileSync(path.join(data, 'tokens.json'), JSON.stringify(stats, null, 1) + '\n');
console.log(JSON.stringify(stats, null, 1));
