// The Gated DeltaNet family's shared parts (arch/qwen3next.cpp), for the architectures built on it
// (qwen3next, qwen35moe). Private to src/arch.
#pragma once

#include "arch/arch.h"

namespace nitro {

/// The tensor table; separate_beta_alpha: ssm_beta + ssm_alpha (qwen35moe) instead of ssm_ba.
std::vector<TensorSpec> delta_net_family_tensors(const ModelHparams& hp, int64_t n_vocab, bool separate_beta_alpha);
ArchConfig delta_net_family_config(const ModelHparams& hp);
void delta_net_family_check(const ModelHparams& hp, const ArchConfig& cfg, const std::string& path);
SynthInit delta_net_family_synth_init(const TensorSpec& s, bool tied_output);
/// Preset parts: Qwen3-Next-80B's shape, the toy, and the values derived from either.
void delta_net_family_base(ModelHparams& h);
void delta_net_family_tiny(ModelHparams& h);
void delta_net_family_derived(ModelHparams& h);

}  // namespace nitro
