// nitro inspect [FILE | -m FILE] [--json] [--tensors | --metadata | --dump NAME]
#include "arch/summary.h"
#include "cli/commands.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "runtime/default_model.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <memory>

namespace nitro::cli {

namespace {

struct InspectOptions {
    std::string path;
    bool json = false;
    bool tensors = false;
    bool metadata = false;
    std::string dump;
};

void print_tensors(const GgufModel& model, bool json) {
    if (json) {
        nlohmann::json arr = nlohmann::json::array();
        for (const auto& t : model.tensors()) {
            std::vector<int64_t> shape(t.ne.begin(), t.ne.begin() + t.n_dims);
            arr.push_back({{"name", t.name}, {"type", type_display_name(t.type)}, {"shape", shape},
                           {"bytes", t.n_bytes}, {"offset", t.offset}, {"shard", t.shard}});
        }
        std::puts(arr.dump(1).c_str());
        return;
    }
    std::printf("%-40s %-7s %-24s %14s %14s\n", "name", "type", "shape (ne)", "bytes", "data offset");
    for (const auto& t : model.tensors())
        std::printf("%-40s %-7s %-24s %14llu %14llu%s\n", t.name.c_str(), type_display_name(t.type).c_str(),
                    t.shape_string().c_str(), static_cast<unsigned long long>(t.n_bytes),
                    static_cast<unsigned long long>(t.offset),
                    model.shards().size() > 1 ? fmt::format("  (shard {})", t.shard + 1).c_str() : "");
}

/// Streams {"name","type","shape","data":[...]} without building a JSON tree of millions of
/// values. Non-finite values (possible in F16/F32 data) are written as null, since JSON has no
/// inf/nan.
void dump_tensor(const GgufModel& model, const std::string& name) {
    const GgufTensorInfo& t = model.get(name);
    std::vector<float> v = dequantize_tensor(t);
    std::vector<int64_t> shape(t.ne.begin(), t.ne.begin() + t.n_dims);
    std::string out = fmt::format("{{\"name\":{},\"type\":\"{}\",\"shape\":{},\"data\":[",
                                  nlohmann::json(t.name).dump(), type_display_name(t.type),
                                  nlohmann::json(shape).dump());
    std::fwrite(out.data(), 1, out.size(), stdout);
    fmt::memory_buffer buf;
    for (size_t i = 0; i < v.size(); ++i) {
        if (i) buf.push_back(',');
        if (std::isfinite(v[i])) fmt::format_to(std::back_inserter(buf), "{}", v[i]);
        else fmt::format_to(std::back_inserter(buf), "null");
        if (buf.size() > (1 << 20)) {
            std::fwrite(buf.data(), 1, buf.size(), stdout);
            buf.clear();
        }
    }
    std::fwrite(buf.data(), 1, buf.size(), stdout);
    std::fputs("]}\n", stdout);
}

std::string value_preview(const GgufValue& v) {
    if (auto* a = std::get_if<std::shared_ptr<GgufArray>>(&v)) {
        const GgufArray& arr = **a;
        std::string s = fmt::format("[{} x {}]", gguf_type_name(arr.type), arr.size());
        std::visit(
            [&](const auto& vec) {
                using E = typename std::decay_t<decltype(vec)>::value_type;
                if constexpr (!std::is_same_v<E, GgufArray>) {
                    for (size_t i = 0; i < std::min<size_t>(vec.size(), 5); ++i) {
                        if constexpr (std::is_same_v<E, std::string>) s += " " + nlohmann::json(vec[i]).dump();
                        else s += fmt::format(" {}", static_cast<E>(vec[i]));
                    }
                    if (vec.size() > 5) s += " ...";
                }
            },
            arr.data);
        return s;
    }
    if (auto* str = std::get_if<std::string>(&v)) {
        std::string q = nlohmann::json(str->size() > 120 ? str->substr(0, 120) : *str)
                            .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        return str->size() > 120 ? fmt::format("{}... ({} bytes)", q, str->size()) : q;
    }
    std::string out;
    std::visit(
        [&](const auto& x) {
            using T = std::decay_t<decltype(x)>;
            if constexpr (std::is_arithmetic_v<T>) out = fmt::format("{}", x);
        },
        v);
    return out;
}

/// One metadata value as JSON: scalars and strings as they are; an array as {"element_type", "n",
/// "first": its first 5 elements} (a vocabulary holds ~200k strings).
nlohmann::json value_json(const GgufValue& v) {
    nlohmann::json out;
    std::visit(
        [&](const auto& x) {
            using T = std::decay_t<decltype(x)>;
            if constexpr (std::is_same_v<T, std::shared_ptr<GgufArray>>) {
                out = {{"element_type", gguf_type_name(x->type)}, {"n", x->size()}, {"first", nlohmann::json::array()}};
                std::visit(
                    [&](const auto& vec) {
                        using E = typename std::decay_t<decltype(vec)>::value_type;
                        if constexpr (!std::is_same_v<E, GgufArray>)
                            for (size_t i = 0; i < std::min<size_t>(vec.size(), 5); ++i)
                                out["first"].push_back(static_cast<E>(vec[i]));
                    },
                    x->data);
            } else {
                out = x;
            }
        },
        v);
    return out;
}

void print_metadata(const GgufModel& model, bool json) {
    if (json) {
        nlohmann::json arr = nlohmann::json::array();
        for (const auto& [k, v] : model.metadata().entries())
            arr.push_back({{"key", k}, {"type", gguf_type_name(gguf_value_type(v))}, {"value", value_json(v)}});
        std::puts(arr.dump(1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
        return;
    }
    for (const auto& [k, v] : model.metadata().entries())
        std::printf("%-48s %-8s %s\n", k.c_str(), gguf_type_name(gguf_value_type(v)), value_preview(v).c_str());
}

}  // namespace

Action add_inspect(CLI::App& app) {
    auto opt = std::make_shared<InspectOptions>();
    CLI::App* sub = app.add_subcommand("inspect", "Print a GGUF model's architecture, hyperparameters, tensor types "
                                                  "and bytes by category (experts per layer)");
    CLI::Option* file = sub->add_option("file", opt->path,
                                        "GGUF file (the first shard of a split model); default: the embedded "
                                        "models/tiny-moe-pystd.gguf");
    sub->add_option("-m,--model", opt->path, "The GGUF file, as the other commands take it")->excludes(file);
    sub->add_flag("--json", opt->json, "Print JSON instead of text");
    // One listing per run: --tensors, --metadata and --dump exclude each other (each used to win
    // silently over the others).
    CLI::Option* tensors = sub->add_flag("--tensors", opt->tensors, "List every tensor: name, type, shape, bytes, offset");
    CLI::Option* metadata =
        sub->add_flag("--metadata", opt->metadata, "List every metadata key with its type and value (arrays abbreviated)");
    sub->add_option("--dump", opt->dump,
                    "Print one tensor dequantized to f32 as JSON {name,type,shape,data}, row-major, ne[0] fastest")
        ->check([](const std::string& name) { return name.empty() ? std::string("give a tensor name") : std::string(); })
        ->excludes(tensors)
        ->excludes(metadata);
    tensors->excludes(metadata);
    return [opt]() {
        GgufModel model(opt->path.empty() ? default_model_path() : opt->path);
        if (!opt->dump.empty()) {
            dump_tensor(model, opt->dump);
            return 0;
        }
        if (opt->metadata) {
            print_metadata(model, opt->json);
            return 0;
        }
        if (opt->tensors) {
            print_tensors(model, opt->json);
            return 0;
        }
        const ModelSummary s = summarize_model(model);
        if (opt->json) std::puts(summary_to_json(s).dump(2).c_str());
        else std::fputs(summary_to_text(s).c_str(), stdout);
        return 0;
    };
}

}  // namespace nitro::cli
