#include "runtime/recurrent_state.h"

#include "core/error.h"
#include "runtime/model_spec.h"

#include <algorithm>

namespace nitro {

RecurrentState::RecurrentState(const ModelSpec& spec, int n_seq) {
    if (n_seq < 1) fail("the recurrent state needs at least one sequence (got {})", n_seq);
    conv_off_.assign(spec.layers.size(), -1);
    delta_off_.assign(spec.layers.size(), -1);
    for (size_t il = 0; il < spec.layers.size(); ++il) {
        if (spec.layers[il].kind != LayerKind::DeltaNet) continue;
        conv_off_[il] = seq_floats_;
        seq_floats_ += spec.ssm.conv_state_size();
        delta_off_[il] = seq_floats_;
        seq_floats_ += spec.ssm.delta_state_size();
    }
    state_.assign(static_cast<size_t>(seq_floats_) * static_cast<size_t>(n_seq), 0.0f);
}

void RecurrentState::reset(int seq) { std::fill(data(seq), data(seq) + seq_floats_, 0.0f); }

void RecurrentState::save(int seq, std::vector<float>& out) const {
    const float* p = const_cast<RecurrentState*>(this)->data(seq);
    out.assign(p, p + seq_floats_);
}

void RecurrentState::restore(int seq, const std::vector<float>& in) {
    if (static_cast<int64_t>(in.size()) != seq_floats_)
        fail("recurrent state snapshot has {} values, expected {}", in.size(), seq_floats_);
    std::copy(in.begin(), in.end(), data(seq));
}

}  // namespace nitro
