// read_hparams on the float keys: a NaN, an infinity or a non-positive rope base / RMS epsilon is a
// load error naming the key (a patched file used to load and then decode NaN logits), and the values
// of the embedded model and of the keys' absence are read as they are.
#include "arch/hparams.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "runtime/default_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

using namespace nitro;

namespace {

/// The embedded model's metadata with `key` (under its architecture) set to `v`.
GgufMetadata with(const std::string& key, double v) {
    GgufModel m(default_model_path());
    GgufMetadata meta = m.metadata();
    meta.set(*meta.get_string("general.architecture") + "." + key, static_cast<float>(v));
    return meta;
}

/// The message read_hparams raises for `meta` ("" if it reads).
std::string error_of(const GgufMetadata& meta) {
    try {
        read_hparams(meta);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST(Hparams, NonFiniteOrNonPositiveFloatKeysAreLoadErrors) {
    const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
    struct Case {
        const char* key;
        double value;
        const char* bound;
    };
    for (const Case& c :
         {Case{"rope.freq_base", nan, "> 0"}, Case{"rope.freq_base", 0, "> 0"}, Case{"rope.freq_base", -1e4, "> 0"},
          Case{"rope.freq_base", inf, "> 0"}, Case{"attention.layer_norm_rms_epsilon", -1, "> 0"},
          Case{"attention.layer_norm_rms_epsilon", 0, "> 0"}, Case{"attention.layer_norm_rms_epsilon", nan, "> 0"},
          Case{"rope.scaling.factor", -2, ">= 0"}, Case{"rope.scaling.factor", inf, ">= 0"},
          Case{"rope.scaling.yarn_beta_fast", nan, ">= 0"}, Case{"rope.scaling.yarn_beta_slow", -1, ">= 0"}}) {
        const std::string msg = error_of(with(c.key, c.value));
        SCOPED_TRACE(std::string(c.key) + " = " + std::to_string(c.value));
        EXPECT_NE(msg.find(std::string(c.key) + "' = "), std::string::npos) << msg;
        EXPECT_NE(msg.find(std::string("must be a finite number ") + c.bound), std::string::npos) << msg;
    }
}

TEST(Hparams, GoodFloatKeysReadAsWritten) {
    GgufModel m(default_model_path());
    const ModelHparams base = read_hparams(m.metadata());
    EXPECT_GT(base.rms_eps, 0.0);
    EXPECT_GT(base.rope_freq_base, 0.0);
    EXPECT_EQ(read_hparams(with("rope.freq_base", 500000.0)).rope_freq_base, 500000.0);
    EXPECT_EQ(read_hparams(with("rope.scaling.factor", 0.0)).rope_scaling_factor, 0.0) << "0 = no scaling, as in llama.cpp";
    EXPECT_FLOAT_EQ(static_cast<float>(read_hparams(with("attention.layer_norm_rms_epsilon", 1e-6)).rms_eps), 1e-6f);
}
