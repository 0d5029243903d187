#include "arch/convert_hf.h"

#include "arch/arch.h"
#include "core/error.h"
#include "core/fp16.h"
#include "core/mapped_file.h"
#include "gguf/writer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>

namespace nitro {

namespace fs = std::filesystem;
using json = nlohmann::json;

int64_t SafeTensor::n_elements() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

float SafeTensor::at(int64_t i) const {
    if (dtype == "F32") {
        float f;
        std::memcpy(&f, data + 4 * i, 4);
        return f;
    }
    uint16_t h;
    std::memcpy(&h, data + 2 * i, 2);
    return dtype == "BF16" ? bf16_to_f32(h) : fp16_to_f32(h);
}

namespace {

// The o200k (gpt-4o) split regex of gpt-oss's tokenizer.json; llama.cpp calls it pre-tokenizer "gpt-4o".
constexpr const char* kO200kRegex =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

json read_json(const fs::path& p) {
    std::ifstream f(p);
    if (!f) fail("cannot open '{}'", p.string());
    try {
        return json::parse(f);
    } catch (const json::exception& e) {
        fail("'{}' is not valid JSON: {}", p.string(), e.what());
    }
}

/// All tensors of the model's safetensors files, mapped.
class SafetensorsSet {
public:
    void add_file(const std::string& path) {
        files_.push_back(std::make_unique<MappedFile>(path));
        const MappedFile& f = *files_.back();
        if (f.size() < 8) fail("{}: too short for a safetensors file", path);
        uint64_t hlen;
        std::memcpy(&hlen, f.data(), 8);
        if (hlen > f.size() - 8) fail("{}: header length {} exceeds the file size {}", path, hlen, f.size());
        json h;
        try {
            h = json::parse(f.data() + 8, f.data() + 8 + hlen);
        } catch (const json::exception& e) {
            fail("{}: the header is not valid JSON: {}", path, e.what());
        }
        if (!h.is_object()) fail("{}: the header is not a JSON object", path);
        const uint64_t base = 8 + hlen, avail = f.size() - base;
        for (auto& [name, v] : h.items()) {
            if (name == "__metadata__") continue;
            SafeTensor t;
            t.name = name;
            try {
                t.dtype = v.at("dtype").get<std::string>();
                t.shape = v.at("shape").get<std::vector<int64_t>>();
                const auto off = v.at("data_offsets").get<std::vector<uint64_t>>();
                if (off.size() != 2 || off[1] < off[0] || off[1] > avail)
                    fail("{}: tensor '{}' has data_offsets outside the file", path, name);
                t.data = f.data() + base + off[0];
                t.n_bytes = off[1] - off[0];
            } catch (const json::exception& e) {
                fail("{}: tensor '{}' has a malformed header entry: {}", path, name, e.what());
            }
            size_t es = 0;
            if (t.dtype == "F32") es = 4;
            else if (t.dtype == "BF16" || t.dtype == "F16") es = 2;
            else
                fail("{}: tensor '{}' has dtype {}; only F32, BF16 and F16 can be converted{}", path, name, t.dtype,
                     name.find("_blocks") != std::string::npos || name.find("_scales") != std::string::npos
                         ? " (MXFP4-packed checkpoints are not supported: dequantize them to bf16 first)"
                         : "");
            for (int64_t d : t.shape)
                if (d < 0) fail("{}: tensor '{}' has a negative dimension", path, name);
            if (static_cast<uint64_t>(t.n_elements()) * es != t.n_bytes)
                fail("{}: tensor '{}' holds {} bytes but its shape and dtype need {}", path, name, t.n_bytes,
                     static_cast<uint64_t>(t.n_elements()) * es);
            if (!tensors_.emplace(name, t).second) fail("tensor '{}' appears in two safetensors files", name);
        }
    }
    const SafeTensor* find(const std::string& name) const {
        auto it = tensors_.find(name);
        return it == tensors_.end() ? nullptr : &it->second;
    }
    const std::map<std::string, SafeTensor>& all() const { return tensors_; }

private:
    std::vector<std::unique_ptr<MappedFile>> files_;
    std::map<std::string, SafeTensor> tensors_;
};

template <typename T>
T cfg_get(const json& c, const char* key, const fs::path& where) {
    auto it = c.find(key);
    if (it == c.end() || it->is_null()) fail("{}: required key '{}' is missing", where.string(), key);
    try {
        return it->get<T>();
    } catch (const json::exception&) {
        fail("{}: key '{}' has the wrong type ({})", where.string(), key, it->type_name());
    }
}

template <typename T>
T cfg_opt(const json& c, const char* key, T def) {
    auto it = c.find(key);
    if (it == c.end() || it->is_null()) return def;
    return it->get<T>();
}


/// How one GGUF tensor is made from a safetensors tensor: `fill(row0, n_rows, dst)` writes
/// ggml rows (ne[0] values each) [row0, row0 + n_rows) as floats.
struct Source {
    const SafeTensor* st = nullptr;
    std::function<void(int64_t, int64_t, float*)> fill;
};

std::shared_ptr<GgufArray> string_array(std::vector<std::string> v) {
    auto a = std::make_shared<GgufArray>();
    a->type = GgufType::STRING;
    a->data = std::move(v);
    return a;
}

/// tokenizer.json -> tokenizer.ggml.* keys. Returns the vocabulary size.
int64_t write_vocab(GgufMetadata& m, const fs::path& path) {
    const json t = read_json(path);
    const json& model = t.at("model");
    if (model.value("type", "") != "BPE") fail("{}: model.type is '{}', only BPE is supported", path.string(), model.value("type", ""));
    std::map<int64_t, std::pair<std::string, int32_t>> by_id;  // id -> (text, token type)
    for (auto& [tok, id] : model.at("vocab").items()) by_id[id.get<int64_t>()] = {tok, 1};  // NORMAL
    for (const auto& a : t.value("added_tokens", json::array())) {
        const int64_t id = a.at("id").get<int64_t>();
        by_id[id] = {a.at("content").get<std::string>(), a.value("special", false) ? 3 : 4};  // CONTROL / USER_DEFINED
    }
    const int64_t n = static_cast<int64_t>(by_id.size());
    if (n == 0 || by_id.begin()->first != 0 || by_id.rbegin()->first != n - 1)
        fail("{}: token ids are not contiguous from 0 (found {} tokens, ids {}..{})", path.string(), n,
             n ? by_id.begin()->first : 0, n ? by_id.rbegin()->first : 0);
    std::vector<std::string> tokens;
    std::vector<int32_t> types;
    for (auto& [id, tt] : by_id) {
        tokens.push_back(tt.first);
        types.push_back(tt.second);
    }
    std::vector<std::string> merges;
    for (const auto& mg : model.at("merges")) {
        if (mg.is_string()) merges.push_back(mg.get<std::string>());
        else if (mg.is_array() && mg.size() == 2) merges.push_back(mg[0].get<std::string>() + " " + mg[1].get<std::string>());
        else fail("{}: a merge is neither \"a b\" nor [a, b]", path.string());
    }
    // Pre-tokenizer: only the o200k split (gpt-oss) is recognised.
    std::string pre = "default";
    const json& pt = t.value("pre_tokenizer", json());
    if (pt.is_object() && pt.value("type", "") == "Sequence")
        for (const auto& p : pt.at("pretokenizers"))
            if (p.value("type", "") == "Split" && p.contains("pattern") && p["pattern"].value("Regex", "") == kO200kRegex)
                pre = "gpt-4o";
    if (pre != "gpt-4o")
        fail("{}: the pre-tokenizer is not gpt-oss's o200k split; this converter writes gpt-oss models only", path.string());

    const auto id_of = [&](const std::string& s) -> int64_t {
        for (size_t i = 0; i < tokens.size(); ++i)
            if (tokens[i] == s) return static_cast<int64_t>(i);
        return -1;
    };
    m.set("tokenizer.ggml.model", std::string("gpt2"));
    m.set("tokenizer.ggml.pre", pre);
    m.set("tokenizer.ggml.tokens", string_array(tokens));
    auto ta = std::make_shared<GgufArray>();
    ta->type = GgufType::INT32;
    ta->data = types;
    m.set("tokenizer.ggml.token_type", ta);
    m.set("tokenizer.ggml.merges", string_array(std::move(merges)));
    // gpt-oss's conventions (its GGUFs from llama.cpp): <|startoftext|> begins, <|return|> ends a
    // generation, <|endoftext|> pads.
    const int64_t bos = id_of("<|startoftext|>"), eos = id_of("<|return|>"), pad = id_of("<|endoftext|>");
    if (bos < 0 || eos < 0 || pad < 0)
        fail("{}: the harmony tokens <|startoftext|>, <|return|> and <|endoftext|> must all be in the vocabulary", path.string());
    m.set("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(bos));
    m.set("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(eos));
    m.set("tokenizer.ggml.padding_token_id", static_cast<uint32_t>(pad));
    m.set("tokenizer.ggml.add_bos_token", false);
    m.set("tokenizer.ggml.add_eos_token", false);
    return n;
}

}  // namespace

ConvertHfResult convert_hf_gptoss(const ConvertHfOptions& opt, const std::function<void(const std::string&)>& log) {
    if (opt.out.empty()) fail("nitro convert: an output path (-o FILE) is required");
    const fs::path dir(opt.in_dir);
    if (!fs::is_directory(dir)) fail("'{}' is not a folder (expected a Hugging Face model folder)", opt.in_dir);
    const fs::path cfg_path = dir / "config.json";
    const json cfg = read_json(cfg_path);
    const std::string mt = cfg.value("model_type", "");
    if (mt != "gpt_oss") fail("{}: model_type is '{}', this converter handles 'gpt_oss' only", cfg_path.string(), mt);

    // --- hyperparameters --------------------------------------------------------------------
    ModelHparams hp;
    hp.arch = "gpt-oss";
    hp.name = opt.name.empty() ? fs::absolute(dir).lexically_normal().filename().string() : opt.name;
    if (hp.name.empty()) hp.name = fs::absolute(dir).lexically_normal().parent_path().filename().string();
    hp.n_embd = cfg_get<int64_t>(cfg, "hidden_size", cfg_path);
    hp.n_layer = cfg_get<int64_t>(cfg, "num_hidden_layers", cfg_path);
    hp.n_head = cfg_get<int64_t>(cfg, "num_attention_heads", cfg_path);
    hp.n_head_kv = cfg_opt<int64_t>(cfg, "num_key_value_heads", hp.n_head);
    hp.head_dim = cfg_opt<int64_t>(cfg, "head_dim", hp.n_embd / hp.n_head);
    hp.head_dim_v = hp.head_dim;
    hp.n_ff_exp = cfg_get<int64_t>(cfg, "intermediate_size", cfg_path);
    hp.n_ff = hp.n_ff_exp;
    hp.n_expert = cfg.contains("num_local_experts") ? cfg_get<int64_t>(cfg, "num_local_experts", cfg_path)
                                                    : cfg_get<int64_t>(cfg, "num_experts", cfg_path);
    hp.n_expert_used = cfg.contains("num_experts_per_tok") ? cfg_get<int64_t>(cfg, "num_experts_per_tok", cfg_path)
                                                           : cfg_get<int64_t>(cfg, "experts_per_token", cfg_path);
    hp.sliding_window = cfg_opt<int64_t>(cfg, "sliding_window", 0);
    hp.n_ctx_train = cfg_get<int64_t>(cfg, "max_position_embeddings", cfg_path);
    hp.rms_eps = cfg_opt<double>(cfg, "rms_norm_eps", 1e-5);
    json rope = cfg.contains("rope_parameters") && cfg["rope_parameters"].is_object() ? cfg["rope_parameters"]
                : cfg.contains("rope_scaling") && cfg["rope_scaling"].is_object()     ? cfg["rope_scaling"]
                                                                                      : json::object();
    hp.rope_freq_base = rope.contains("rope_theta") ? rope["rope_theta"].get<double>() : cfg_opt<double>(cfg, "rope_theta", 10000.0);
    const std::string rope_type = rope.value("rope_type", rope.value("type", std::string("default")));
    if (rope_type == "yarn") {
        hp.rope_scaling = "yarn";
        hp.rope_scaling_factor = rope.at("factor").get<double>();
        hp.rope_orig_ctx = rope.at("original_max_position_embeddings").get<int64_t>();
        hp.rope_yarn_beta_fast = rope.value("beta_fast", 32.0);
        hp.rope_yarn_beta_slow = rope.value("beta_slow", 1.0);
    } else if (rope_type != "default") {
        fail("{}: rope type '{}' is not supported (default or yarn)", cfg_path.string(), rope_type);
    }
    // llama.cpp's gpt-oss uses the sliding window on even layers and full attention on odd ones.
    if (cfg.contains("layer_types") && cfg["layer_types"].is_array()) {
        const auto lt = cfg["layer_types"].get<std::vector<std::string>>();
        if (static_cast<int64_t>(lt.size()) != hp.n_layer)
            fail("{}: layer_types has {} entries for {} layers", cfg_path.string(), lt.size(), hp.n_layer);
        for (int64_t i = 0; i < hp.n_layer; ++i) {
            const char* want = i % 2 == 0 ? "sliding_attention" : "full_attention";
            if (lt[static_cast<size_t>(i)] != want)
                fail("{}: layer_types[{}] is '{}'; gpt-oss in llama.cpp needs '{}' (sliding on even layers)",
                     cfg_path.string(), i, lt[static_cast<size_t>(i)], want);
        }
    }
    if (hp.sliding_window <= 0) fail("{}: gpt-oss needs a sliding_window > 0", cfg_path.string());
    if (cfg_opt<double>(cfg, "swiglu_limit", 7.0) != 7.0)
        fail("{}: swiglu_limit must be 7.0 (llama.cpp's gpt-oss activation)", cfg_path.string());
    for (GgmlType t : {opt.expert_type, opt.embd_type, opt.attn_type}) {
        const auto& tt = type_traits(t);
        if (tt.is_quantized && !tt.quantize) fail("nitro convert: type {} has no quantizer in this build", type_display_name(t));
        if (hp.n_embd % tt.block_size || (t == opt.expert_type && hp.n_ff_exp % tt.block_size) ||
            (t == opt.attn_type && (hp.n_head * hp.head_dim) % tt.block_size))
            fail("nitro convert: type {} needs rows that are multiples of {} values (n_embd {}, n_ff_exp {})",
                 type_display_name(t), tt.block_size, hp.n_embd, hp.n_ff_exp);
    }

    // --- tensors ------------------------------------------------------------------------------
    SafetensorsSet st;
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(dir)) {
        const std::string fn = e.path().filename().string();
        if (fn.rfind("model", 0) == 0 && e.path().extension() == ".safetensors") files.push_back(e.path().string());
    }
    std::sort(files.begin(), files.end());
    if (files.empty()) fail("'{}' holds no model*.safetensors file", opt.in_dir);
    for (const auto& f : files) st.add_file(f);

    GgufWriter w;
    GgufMetadata& m = w.metadata();
    write_hparams(m, hp);
    for (const auto& [k, v] : opt.extra_strings) m.set("general." + k, v);
    m.set("general.file_type", llama_file_type_for(opt.expert_type));
    m.set("general.quantization_version", uint32_t{2});
    const int64_t n_vocab = write_vocab(m, dir / "tokenizer.json");
    if (!opt.chat_template.empty()) {
        std::ifstream f(opt.chat_template, std::ios::binary);
        if (!f) fail("cannot open the chat template '{}'", opt.chat_template);
        std::ostringstream ss;
        ss << f.rdbuf();
        m.set("tokenizer.chat_template", ss.str());
    }
    const int64_t cfg_vocab = cfg_get<int64_t>(cfg, "vocab_size", cfg_path);
    if (cfg_vocab != n_vocab)
        fail("{}: vocab_size {} differs from the {} tokens of tokenizer.json", cfg_path.string(), cfg_vocab, n_vocab);

    const ArchInfo* arch = find_arch(hp.arch);
    const std::vector<TensorSpec> specs = arch->tensors(hp, n_vocab);
    std::set<std::string> used;
    const auto need = [&](const std::string& name, std::vector<int64_t> shape) -> const SafeTensor* {
        const SafeTensor* t = st.find(name);
        if (!t) fail("'{}': tensor '{}' is missing", opt.in_dir, name);
        if (t->shape != shape) {
            std::string want, got;
            for (auto d : shape) want += (want.empty() ? "" : ", ") + std::to_string(d);
            for (auto d : t->shape) got += (got.empty() ? "" : ", ") + std::to_string(d);
            fail("'{}': tensor '{}' has shape [{}], expected [{}]", opt.in_dir, name, got, want);
        }
        used.insert(name);
        return t;
    };
    const int64_t E = hp.n_embd, X = hp.n_expert, Fx = hp.n_ff_exp;
    std::vector<Source> sources;
    for (const auto& s : specs) {
        Source src;
        const int64_t ne0 = s.ne[0];
        // Same bytes order: ggml's ne[0] is torch's last dimension.
        const auto direct = [&](const std::string& hf, std::vector<int64_t> shape) {
            src.st = need(hf, std::move(shape));
            const SafeTensor* t = src.st;
            src.fill = [t, ne0](int64_t r0, int64_t nr, float* dst) {
                for (int64_t i = 0; i < nr * ne0; ++i) dst[i] = t->at(r0 * ne0 + i);
            };
        };
        std::string n = s.name;
        if (n == "token_embd.weight") direct("model.embed_tokens.weight", {n_vocab, E});
        else if (n == "output_norm.weight") direct("model.norm.weight", {E});
        else if (n == "output.weight") {
            if (st.find("lm_head.weight")) direct("lm_head.weight", {n_vocab, E});
            else if (cfg_opt<bool>(cfg, "tie_word_embeddings", false)) {
                src.st = st.find("model.embed_tokens.weight");
                const SafeTensor* t = src.st;
                if (!t) fail("'{}': tensor 'model.embed_tokens.weight' is missing", opt.in_dir);
                src.fill = [t, ne0](int64_t r0, int64_t nr, float* dst) {
                    for (int64_t i = 0; i < nr * ne0; ++i) dst[i] = t->at(r0 * ne0 + i);
                };
            } else fail("'{}': tensor 'lm_head.weight' is missing", opt.in_dir);
        } else {
            const int64_t il = std::stoll(n.substr(4, n.find('.', 4) - 4));
            const std::string what = n.substr(n.find('.', 4) + 1);
            const std::string p = "model.layers." + std::to_string(il) + ".";
            const int64_t q = hp.n_head * hp.head_dim, kv = hp.n_head_kv * hp.head_dim;
            if (what == "attn_norm.weight") direct(p + "input_layernorm.weight", {E});
            else if (what == "post_attention_norm.weight") direct(p + "post_attention_layernorm.weight", {E});
            else if (what == "attn_q.weight") direct(p + "self_attn.q_proj.weight", {q, E});
            else if (what == "attn_q.bias") direct(p + "self_attn.q_proj.bias", {q});
            else if (what == "attn_k.weight") direct(p + "self_attn.k_proj.weight", {kv, E});
            else if (what == "attn_k.bias") direct(p + "self_attn.k_proj.bias", {kv});
            else if (what == "attn_v.weight") direct(p + "self_attn.v_proj.weight", {kv, E});
            else if (what == "attn_v.bias") direct(p + "self_attn.v_proj.bias", {kv});
            else if (what == "attn_output.weight") direct(p + "self_attn.o_proj.weight", {E, q});
            else if (what == "attn_output.bias") direct(p + "self_attn.o_proj.bias", {E});
            else if (what == "attn_sinks.weight") direct(p + "self_attn.sinks", {hp.n_head});
            else if (what == "ffn_gate_inp.weight") direct(p + "mlp.router.weight", {X, E});
            else if (what == "ffn_gate_inp.bias") direct(p + "mlp.router.bias", {X});
            else if (what == "ffn_down_exps.bias") direct(p + "mlp.experts.down_proj_bias", {X, E});
            else if (what == "ffn_gate_exps.weight" || what == "ffn_up_exps.weight") {
                // gate_up_proj [X, E, 2F], gate = [..., ::2], up = [..., 1::2]; ggml wants [E, F, X]
                // (row e*F + f holds gate[e][:, f]), i.e. a transpose of each expert.
                const SafeTensor* t = need(p + "mlp.experts.gate_up_proj", {X, E, 2 * Fx});
                src.st = t;
                const int64_t par = what == "ffn_up_exps.weight";
                src.fill = [t, E, Fx, par](int64_t r0, int64_t nr, float* dst) {
                    for (int64_t r = r0; r < r0 + nr; ++r) {
                        const int64_t e = r / Fx, f = r % Fx;
                        for (int64_t i = 0; i < E; ++i) *dst++ = t->at((e * E + i) * 2 * Fx + 2 * f + par);
                    }
                };
            } else if (what == "ffn_gate_exps.bias" || what == "ffn_up_exps.bias") {
                const SafeTensor* t = need(p + "mlp.experts.gate_up_proj_bias", {X, 2 * Fx});
                src.st = t;
                const int64_t par = what == "ffn_up_exps.bias";
                src.fill = [t, Fx, par](int64_t r0, int64_t nr, float* dst) {
                    for (int64_t e = r0; e < r0 + nr; ++e)
                        for (int64_t f = 0; f < Fx; ++f) *dst++ = t->at(e * 2 * Fx + 2 * f + par);
                };
            } else if (what == "ffn_down_exps.weight") {
                // down_proj [X, F, E] (out = h @ down_proj[e]); ggml wants [F, E, X]: row e*E + j
                // holds down_proj[e][:, j].
                const SafeTensor* t = need(p + "mlp.experts.down_proj", {X, Fx, E});
                src.st = t;
                src.fill = [t, E, Fx](int64_t r0, int64_t nr, float* dst) {
                    for (int64_t r = r0; r < r0 + nr; ++r) {
                        const int64_t e = r / E, j = r % E;
                        for (int64_t f = 0; f < Fx; ++f) *dst++ = t->at((e * Fx + f) * E + j);
                    }
                };
            } else {
                fail("nitro convert: no Hugging Face source known for '{}'", n);
            }
        }
        sources.push_back(std::move(src));
    }
    std::vector<std::string> unused;
    for (const auto& [name, t] : st.all())
        if (!used.count(name) && !(name == "model.embed_tokens.weight")) unused.push_back(name);
    if (!unused.empty())
        fail("'{}': {} tensor(s) have no place in a gpt-oss GGUF, e.g. '{}'", opt.in_dir, unused.size(), unused.front());

    for (const auto& s : specs) {
        GgmlType t = GgmlType::F32;
        switch (s.kind) {
            case TensorKind::Embedding: case TensorKind::Output: t = opt.embd_type; break;
            case TensorKind::Matrix: t = opt.attn_type; break;
            case TensorKind::Expert: t = opt.expert_type; break;
            default: t = GgmlType::F32; break;
        }
        w.add_tensor(s.name, t, s.ne);
    }
    ConvertHfResult res;
    res.n_vocab = n_vocab;
    res.n_tensors = static_cast<int64_t>(specs.size());
    w.open(opt.out);
    std::vector<float> fbuf;
    std::vector<uint8_t> obuf;
    for (size_t i = 0; i < specs.size(); ++i) {
        const GgufTensorInfo& info = w.tensors()[i];
        const int64_t ne0 = info.ne[0], rows = info.ne[1] * info.ne[2] * info.ne[3];
        const int64_t chunk = std::max<int64_t>(1, (1 << 20) / ne0);
        for (int64_t r = 0; r < rows; r += chunk) {
            const int64_t nr = std::min(chunk, rows - r);
            fbuf.resize(static_cast<size_t>(nr * ne0));
            sources[i].fill(r, nr, fbuf.data());
            obuf.resize(row_size(info.type, ne0) * static_cast<size_t>(nr));
            if (info.type == GgmlType::F32) std::memcpy(obuf.data(), fbuf.data(), fbuf.size() * 4);
            else if (info.type == GgmlType::F16) {
                auto* h = reinterpret_cast<uint16_t*>(obuf.data());
                for (size_t k = 0; k < fbuf.size(); ++k) h[k] = f32_to_fp16(fbuf[k]);
            } else if (info.type == GgmlType::BF16) {
                auto* h = reinterpret_cast<uint16_t*>(obuf.data());
                for (size_t k = 0; k < fbuf.size(); ++k) h[k] = f32_to_bf16(fbuf[k]);
            } else {
                quantize(info.type, fbuf.data(), obuf.data(), nr * ne0);
            }
            w.write_data(obuf.data(), obuf.size());
        }
        if (log) log(fmt::format("{:<32} {:<6} {}", info.name, type_display_name(info.type), info.shape_string()));
    }
    w.finish();
    res.file_bytes = fs::file_size(opt.out);
    return res;
}

}  // namespace nitro
