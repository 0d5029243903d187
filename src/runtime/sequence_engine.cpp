#include "runtime/sequence_engine.h"

#include "core/error.h"
#include "runtime/route_replay.h"

#include <algorithm>

namespace nitro {

int64_t check_seq_batch(const SeqBatch& b, std::span<const int64_t> n_past, int64_t n_vocab, int64_t n_ctx) {
    const int64_t n = static_cast<int64_t>(b.tokens.size());
    const int64_t n_seq = static_cast<int64_t>(n_past.size());
    if (n == 0) fail("eval_batch: no rows");
    if (b.seq.size() != b.tokens.size()) fail("eval_batch: {} tokens but {} sequence ids", b.tokens.size(), b.seq.size());
    if (!b.logits.empty() && b.logits.size() != b.tokens.size())
        fail("eval_batch: {} tokens but {} logits flags", b.tokens.size(), b.logits.size());
    std::vector<int64_t> next(n_past.begin(), n_past.end());  // each sequence's next position
    int64_t n_out = 0;
    for (int64_t i = 0; i < n; ++i) {
        const int32_t q = b.seq[static_cast<size_t>(i)], t = b.tokens[static_cast<size_t>(i)];
        if (q < 0 || q >= n_seq) fail("eval_batch: row {} names sequence {} but the session holds {}", i, q, n_seq);
        if (t < 0 || t >= n_vocab) fail("token id {} is out of range (vocabulary has {} tokens)", t, n_vocab);
        if (++next[static_cast<size_t>(q)] > n_ctx)
            fail("sequence {} needs {} positions but the context holds {} (n_ctx)", q, next[static_cast<size_t>(q)], n_ctx);
        if (!b.logits.empty() && b.logits[static_cast<size_t>(i)]) ++n_out;
    }
    return n_out;
}

SequenceEngine::SequenceEngine(ModelSpec spec, const SessionOptions& opt, SnapshotPolicy policy)
    : spec_(std::move(spec)), policy_(policy) {
    if (opt.n_seq < 1) fail("the number of sequences must be positive (got {})", opt.n_seq);
    n_past_.assign(static_cast<size_t>(opt.n_seq), 0);
    recurrent_ = spec_.has_recurrent();
    if (recurrent_) {
        if (opt.n_checkpoints < 0) fail("the number of recurrent-state checkpoints must be >= 0 (got {})", opt.n_checkpoints);
        n_checkpoints_ = opt.n_checkpoints;
        history_.resize(static_cast<size_t>(opt.n_seq));
        snapshots_.resize(static_cast<size_t>(opt.n_seq));
    }
}

SequenceEngine::~SequenceEngine() = default;

void SequenceEngine::exec_group(const ChunkArgs&, float*) { fail("this engine runs no layer-major prompt groups"); }

int64_t SequenceEngine::seq_n_past(int seq) const {
    if (seq < 0 || seq >= n_seq()) fail("sequence {} does not exist (the session holds {})", seq, n_seq());
    return n_past_[static_cast<size_t>(seq)];
}

std::vector<int64_t> SequenceEngine::seq_checkpoints(int seq) const {
    (void)seq_n_past(seq);
    std::vector<int64_t> out;
    if (recurrent_)
        for (const Snapshot& s : snapshots_[static_cast<size_t>(seq)]) out.push_back(s.pos);
    return out;
}

uint64_t SequenceEngine::snapshot_bytes() const {
    uint64_t b = 0;
    for (const auto& snaps : snapshots_)
        for (const Snapshot& s : snaps) b += s.state.size() * sizeof(float);
    return b;
}

bool SequenceEngine::set_route_callback(std::function<void(const RouteEvent&)> cb) {
    on_route_ = std::move(cb);
    routing_changed();
    return true;
}

bool SequenceEngine::set_route_replay(std::shared_ptr<RouteReplay> replay) {
    replay_ = std::move(replay);
    routing_changed();
    return true;
}

void SequenceEngine::replay_logits(int layer, float* logits) const { replay_->fill_logits(layer, logits); }

std::string SequenceEngine::replay_note() const {
    return replay_ ? ", routing replayed from " + replay_->name() + " (outputs are not the model's)" : std::string();
}

int64_t SequenceEngine::prompt_group_tokens() const {
    const int64_t g = exec_group_tokens();
    return g > spec_.n_ubatch && !replay_ ? g : 0;
}

void SequenceEngine::reset_sequences() {
    std::fill(n_past_.begin(), n_past_.end(), 0);
    for (int q = 0; q < n_seq(); ++q) {
        if (!recurrent_) continue;
        history_[static_cast<size_t>(q)].clear();
        snapshots_[static_cast<size_t>(q)].clear();
        state_reset(q);
    }
}

void SequenceEngine::snapshot(int q) {
    if (!recurrent_ || n_checkpoints_ == 0) return;
    auto& snaps = snapshots_[static_cast<size_t>(q)];
    Snapshot s;
    if (static_cast<int>(snaps.size()) >= n_checkpoints_) {  // reuse the oldest one's storage
        s = std::move(snaps.front());
        snaps.erase(snaps.begin());
    }
    s.pos = n_past_[static_cast<size_t>(q)];
    state_save(q, s.state);
    snaps.push_back(std::move(s));
}

void SequenceEngine::run(const ChunkArgs& c, bool group, float* out) {
    if (replay_) replay_->next_chunk(c.prefill);  // the trace tokens of this chunk's rows
    if (group) exec_group(c, out);
    else exec_chunk(c, out);
    for (const SeqGroup& g : c.groups) {
        const size_t q = static_cast<size_t>(g.seq);
        n_past_[q] = g.pos0 + g.n;
        if (!recurrent_) continue;
        history_[q].insert(history_[q].end(), c.tokens.begin() + g.off, c.tokens.begin() + g.off + g.n);
        if (policy_ == SnapshotPolicy::EveryChunk && g.n > 1) snapshot(g.seq);
    }
}

void SequenceEngine::eval_rows(int seq, std::span<const int32_t> tokens, ChunkArgs::Logits logits, float* out) {
    const int64_t n = static_cast<int64_t>(tokens.size()), V = spec_.n_vocab, ub = spec_.n_ubatch;
    const int64_t group = prompt_group_tokens();
    for (int64_t i = 0; i < n;) {
        // More than one block left and the executor plans groups: the next up to `group` tokens
        // layer-major; else a chunk of n_ubatch.
        const bool as_group = group > 0 && n - i > ub;
        const int64_t k = as_group ? std::min(group, n - i) : std::min(ub, n - i);
        const bool last = i + k == n;
        const int64_t pos0 = n_past_[static_cast<size_t>(seq)];
        groups_.assign(1, SeqGroup{seq, 0, k, pos0});
        prefill_.assign(static_cast<size_t>(k), k > 1);
        ChunkArgs c;
        c.n = k;
        c.pos0 = pos0;
        c.logits = logits == ChunkArgs::Logits::All                 ? ChunkArgs::Logits::All
                   : logits == ChunkArgs::Logits::Last && last ? ChunkArgs::Logits::Last
                                                               : ChunkArgs::Logits::None;
        c.tokens = tokens.subspan(static_cast<size_t>(i), static_cast<size_t>(k));
        if (seq != 0) {
            seq_.assign(static_cast<size_t>(k), seq);
            c.seq = seq_;
        }
        c.prefill = prefill_;
        c.groups = groups_;
        float* dst = logits == ChunkArgs::Logits::All ? out + i * V : (c.logits == ChunkArgs::Logits::Last ? out : nullptr);
        run(c, as_group, dst);
        i += k;
    }
}

void SequenceEngine::eval(std::span<const int32_t> tokens, bool all_logits, std::vector<float>& logits) {
    check_eval(spec_, n_past_[0], tokens);
    const int64_t n = static_cast<int64_t>(tokens.size());
    logits.resize(static_cast<size_t>((all_logits ? n : 1) * spec_.n_vocab));
    eval_rows(0, tokens, all_logits ? ChunkArgs::Logits::All : ChunkArgs::Logits::Last, logits.data());
    if (policy_ == SnapshotPolicy::EndOfEval && n > 1) snapshot(0);
}

void SequenceEngine::eval_batch(const SeqBatch& b, std::vector<float>& logits) {
    // Check everything before touching a sequence, so a bad batch leaves the engine unchanged.
    const int64_t n = static_cast<int64_t>(b.tokens.size()), V = spec_.n_vocab, ub = spec_.n_ubatch;
    const int64_t n_out = check_seq_batch(b, n_past_, V, spec_.n_ctx);
    logits.resize(static_cast<size_t>(n_out * V));
    std::vector<int64_t> rows_of(n_past_.size(), 0);
    for (int32_t q : b.seq) ++rows_of[static_cast<size_t>(q)];
    const auto end_snapshots = [&] {
        if (policy_ != SnapshotPolicy::EndOfEval) return;
        for (int q = 0; q < n_seq(); ++q)
            if (rows_of[static_cast<size_t>(q)] > 1) snapshot(q);
    };
    // Rows of one sequence whose logits are wanted for every row, the last or none, longer than a
    // block, where the executor plans layer-major groups: eval's path (a lone prompt in the server).
    if (prompt_group_tokens() > 0 && n > ub && rows_of[static_cast<size_t>(b.seq[0])] == n) {
        const bool last_only = n_out == 1 && b.logits[static_cast<size_t>(n - 1)] != 0;
        if (n_out == n || last_only || n_out == 0) {
            eval_rows(b.seq[0], b.tokens,
                      n_out == n ? ChunkArgs::Logits::All : last_only ? ChunkArgs::Logits::Last : ChunkArgs::Logits::None,
                      logits.data());
            end_snapshots();
            return;
        }
    }
    float* out = logits.data();
    std::vector<int64_t> count(n_past_.size()), first(n_past_.size()), next;
    for (int64_t i = 0; i < n; i += ub) {
        const int64_t k = std::min(ub, n - i);
        // Group the chunk's rows by sequence, in the order sequences first appear; each sequence's
        // rows keep their order, so they are consecutive positions of it.
        std::fill(count.begin(), count.end(), 0);
        groups_.clear();
        for (int64_t r = 0; r < k; ++r) {
            const int32_t q = b.seq[static_cast<size_t>(i + r)];
            if (count[static_cast<size_t>(q)]++ == 0) groups_.push_back(SeqGroup{q, 0, 0, n_past_[static_cast<size_t>(q)]});
        }
        int64_t off = 0;
        for (SeqGroup& g : groups_) {
            g.off = off;
            g.n = count[static_cast<size_t>(g.seq)];
            first[static_cast<size_t>(g.seq)] = off;
            off += g.n;
        }
        tok_.resize(static_cast<size_t>(k));
        seq_.resize(static_cast<size_t>(k));
        pos_.resize(static_cast<size_t>(k));
        prefill_.resize(static_cast<size_t>(k));
        logit_rows_.clear();
        next = n_past_;
        for (int64_t r = 0; r < k; ++r) {
            const int32_t q = b.seq[static_cast<size_t>(i + r)];
            const size_t j = static_cast<size_t>(first[static_cast<size_t>(q)]++);
            tok_[j] = b.tokens[static_cast<size_t>(i + r)];
            seq_[j] = q;
            pos_[j] = next[static_cast<size_t>(q)]++;
            prefill_[j] = count[static_cast<size_t>(q)] > 1;
            if (!b.logits.empty() && b.logits[static_cast<size_t>(i + r)]) logit_rows_.push_back(static_cast<int64_t>(j));
        }
        ChunkArgs c;
        c.n = k;
        c.pos0 = pos_[0];
        c.tokens = tok_;
        c.seq = seq_;
        c.pos = pos_;
        c.prefill = prefill_;
        c.groups = groups_;
        // A single row is a decode step (Last); more rows name theirs (Rows, in the batch's order).
        c.logits = logit_rows_.empty() ? ChunkArgs::Logits::None : k == 1 ? ChunkArgs::Logits::Last : ChunkArgs::Logits::Rows;
        c.logit_rows = logit_rows_;
        run(c, false, logit_rows_.empty() ? nullptr : out);
        out += static_cast<int64_t>(logit_rows_.size()) * V;
    }
    end_snapshots();
}

void SequenceEngine::seq_truncate(int seq, int64_t n) {
    const int64_t have = seq_n_past(seq);
    if (n < 0 || n > have) fail("cannot truncate sequence {} of {} tokens to {}", seq, have, n);
    if (n == have) return;
    const size_t q = static_cast<size_t>(seq);
    if (!recurrent_) {
        n_past_[q] = n;
        return;
    }
    // A recurrent state holds every token before it: restore the newest snapshot at or before n
    // (or the initial state), then evaluate the held tokens from there up to n again.
    auto& snaps = snapshots_[q];
    while (!snaps.empty() && snaps.back().pos > n) snaps.pop_back();
    int64_t from = 0;
    if (snaps.empty()) {
        state_reset(seq);
    } else {
        state_restore(seq, snaps.back().state);
        from = snaps.back().pos;
    }
    auto& hist = history_[q];
    std::vector<int32_t> redo(hist.begin() + from, hist.begin() + n);
    hist.resize(static_cast<size_t>(from));
    n_past_[q] = from;
    if (redo.empty()) return;
    recomputed_tokens_ += static_cast<int64_t>(redo.size());
    // The K/V entries of attention layers at [from, n) are rewritten with the same values.
    std::vector<int32_t> seqs(redo.size(), seq);
    std::vector<float> unused;
    eval_batch(SeqBatch{redo, seqs, {}}, unused);
}

}  // namespace nitro
