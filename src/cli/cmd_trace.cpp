// nitro trace info|export|import|synth: router trace files (docs/trace-format.md).
#include "cli/commands.h"
#include "cli/validators.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "trace/model_header.h"
#include "trace/trace_file.h"
#include "trace/trace_jsonl.h"
#include "trace/trace_synth.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <memory>
#include <set>

namespace nitro::cli {

namespace {

struct TraceOptions {
    std::string input, output, model;
    bool json = false;
    uint32_t n_layer = 0, n_expert = 0, n_used = 0;
    uint64_t expert_bytes = 0;
    uint32_t chunk = 4096;
    bool no_weights = false;
    SynthOptions synth;
};

/// Counts and shape of a trace for `trace info`.
nlohmann::json trace_info_json(const Trace& t, const TraceFileInfo& fi) {
    size_t n_steps = 0;
    const std::vector<uint32_t> step = t.step_index(&n_steps);
    std::set<uint32_t> seqs(t.seq.begin(), t.seq.end());
    std::vector<uint64_t> per_layer(t.header.n_layer, 0);
    std::vector<uint32_t> layers_of_step(n_steps, 0);
    uint64_t prefill = 0;
    for (size_t i = 0; i < t.size(); ++i) {
        ++per_layer[t.layer[i]];
        ++layers_of_step[step[i]];
        prefill += t.phase[i] == TracePhase::Prefill;
    }
    const TraceHeader& h = t.header;
    uint32_t moe_layers = 0;  // layers with routed experts (a dense FFN layer has no records)
    std::vector<uint32_t> layer_experts;
    for (uint32_t l = 0; l < h.n_layer; ++l) {
        moe_layers += h.experts_of(l) > 0;
        layer_experts.push_back(h.experts_of(l));
    }
    uint64_t gaps = 0;
    for (uint32_t n : layers_of_step) gaps += n < moe_layers;
    return {{"model_name", h.model_name},
            {"model_hash", fmt::format("{:016x}", h.model_hash)},
            {"n_layer", h.n_layer},
            {"n_expert", h.n_expert},
            {"n_expert_used", h.n_expert_used},
            {"has_weights", h.has_weights},
            {"bytes_per_expert_per_layer", h.bytes_per_expert_per_layer},
            {"layer_n_expert", layer_experts},
            {"version", fi.version},
            {"file_bytes", fi.file_bytes},
            {"chunks", fi.n_chunks},
            {"record_bytes", trace_record_bytes(h)},
            {"records", t.size()},
            {"records_prefill", prefill},
            {"records_decode", t.size() - prefill},
            {"sequences", seqs.size()},
            {"tokens", n_steps},
            {"tokens_missing_layers", gaps},
            {"records_per_layer", per_layer},
            {"valid", true}};
}

void print_info_text(const nlohmann::json& j, const std::string& path) {
    fmt::print("{}: valid nitro trace (header, {} chunk checksums and every record checked)\n", path,
               j["chunks"].get<uint64_t>());
    fmt::print("  model            {} (file hash {})\n", j["model_name"].get<std::string>(),
               j["model_hash"].get<std::string>());
    fmt::print("  shape            {} layers x {} experts, top-{}, router weights: {}\n", j["n_layer"].get<uint32_t>(),
               j["n_expert"].get<uint32_t>(), j["n_expert_used"].get<uint32_t>(),
               j["has_weights"].get<bool>() ? "yes" : "no");
    const auto counts = j["layer_n_expert"].get<std::vector<uint32_t>>();
    const auto dense = std::count(counts.begin(), counts.end(), 0u);
    if (dense > 0) fmt::print("  dense layers     {} of {} have no routed experts (no records)\n", dense, counts.size());
    const auto bytes = j["bytes_per_expert_per_layer"].get<std::vector<uint64_t>>();
    uint64_t mx = 0;
    for (uint64_t b : bytes) mx = std::max(mx, b);
    fmt::print("  expert bytes     {}\n", mx ? fmt::format("{} bytes per expert (largest layer)", mx) : "unknown");
    fmt::print("  file             {} bytes, {} bytes per record\n", j["file_bytes"].get<uint64_t>(),
               j["record_bytes"].get<uint64_t>());
    fmt::print("  records          {} ({} prefill, {} decode)\n", j["records"].get<uint64_t>(),
               j["records_prefill"].get<uint64_t>(), j["records_decode"].get<uint64_t>());
    fmt::print("  sequences        {}\n", j["sequences"].get<uint64_t>());
    fmt::print("  tokens           {} ({} of them lack some layers)\n", j["tokens"].get<uint64_t>(),
               j["tokens_missing_layers"].get<uint64_t>());
    fmt::print("  records/layer    {}\n", fmt::join(j["records_per_layer"].get<std::vector<uint64_t>>(), " "));
}

/// Header for `import` / `synth` from -m MODEL or the shape flags.
TraceHeader header_from_options(const TraceOptions& o, bool need_shape) {
    if (!o.model.empty()) {
        GgufModel model(o.model);
        return trace_header_from_model(model, !o.no_weights);
    }
    TraceHeader h;
    if (need_shape) {
        if (!o.n_layer || !o.n_expert || !o.n_used)
            fail("give the model (-m MODEL) or its shape (--layers, --experts, --used)");
        h.model_name = "synthetic";
        h.n_layer = o.n_layer;
        h.n_expert = o.n_expert;
        h.n_expert_used = o.n_used;
        if (o.expert_bytes) h.bytes_per_expert_per_layer.assign(o.n_layer, o.expert_bytes);
        h.validate("shape flags");
    }
    return h;
}

}  // namespace

Action add_trace(CLI::App& app) {
    auto o = std::make_shared<TraceOptions>();
    CLI::App* sub = app.add_subcommand("trace", "Router trace files: info, export/import JSON Lines, synthetic traces");
    sub->require_subcommand(1);

    CLI::App* info = sub->add_subcommand("info", "Validate a trace and print its header and counts");
    info->add_option("file", o->input, "Trace file (.nmtr)")->required();
    info->add_flag("--json", o->json, "Print JSON");

    CLI::App* exp = sub->add_subcommand("export", "Write a trace as JSON Lines (one object per token and layer)");
    exp->add_option("file", o->input, "Trace file (.nmtr)")->required();
    exp->add_option("-o,--output", o->output, "Output .jsonl file ('-' = stdout)")->required();

    CLI::App* imp = sub->add_subcommand("import", "Convert JSON Lines (problem_id, token_idx, layer, experts, "
                                                  "gating_probs) to a validated trace file");
    imp->add_option("file", o->input, "JSON Lines input")->required();
    imp->add_option("-o,--output", o->output, "Output trace file")->required();
    imp->add_option("-m,--model", o->model, "GGUF model the routing came from (shape, expert bytes, file hash)");
    imp->add_option("--n-layer", o->n_layer, "Layers, when no model is given (default: highest layer + 1)");
    imp->add_option("--n-expert", o->n_expert, "Experts per layer, when no model is given (default: highest id + 1)");
    imp->add_option("--chunk", o->chunk, "Records per checksummed chunk")->capture_default_str();

    CLI::App* syn = sub->add_subcommand("synth", "Generate a synthetic trace (Zipf-skewed routing) for a model's shape");
    syn->add_option("-o,--output", o->output, "Output trace file")->required();
    syn->add_option("-m,--model", o->model, "GGUF model whose shape (and expert bytes, hash) to use");
    syn->add_option("--layers", o->n_layer, "Layers (without -m)")->check(integer_at_least(1));
    syn->add_option("--experts", o->n_expert, "Experts per layer (without -m)")->check(integer_at_least(1));
    syn->add_option("--used", o->n_used, "Experts selected per token (without -m)")->check(integer_at_least(1));
    syn->add_option("--expert-bytes", o->expert_bytes, "Bytes of one expert, every layer (without -m; 0 = unknown)");
    syn->add_option("--sequences", o->synth.n_sequences, "Sequences (requests)")->capture_default_str();
    syn->add_option("--prompt", o->synth.prompt_tokens, "Prompt tokens per sequence (prefill)")->capture_default_str();
    syn->add_option("--decode", o->synth.decode_tokens, "Generated tokens per sequence")->capture_default_str();
    syn->add_option("--zipf", o->synth.zipf_s, "Popularity skew s: P(rank r) ~ 1/r^s")->capture_default_str();
    syn->add_option("--locality", o->synth.locality,
                    "Probability that a pick repeats an expert of the previous token, [0, 1]")
        ->capture_default_str();
    syn->add_option("--drift", o->synth.drift, "Share of the popularity ranking reshuffled per sequence, [0, 1]")
        ->capture_default_str();
    syn->add_option("--seed", o->synth.seed, "Random seed")->capture_default_str();
    syn->add_flag("--no-weights", o->no_weights, "Do not store router weights");
    syn->add_option("--chunk", o->chunk, "Records per checksummed chunk")->capture_default_str();

    return [o, info, exp, imp, syn]() {
        if (info->parsed()) {
            TraceFileInfo fi;
            const Trace t = read_trace(o->input, &fi);
            const nlohmann::json j = trace_info_json(t, fi);
            if (o->json) std::puts(j.dump(1).c_str());
            else print_info_text(j, o->input);
            return 0;
        }
        if (exp->parsed()) {
            const Trace t = read_trace(o->input);
            if (o->output == "-") {
                export_jsonl(t, std::cout);
                return 0;
            }
            std::ofstream f(o->output);
            if (!f) fail("{}: cannot create", o->output);
            export_jsonl(t, f);
            f.close();
            if (!f) fail("{}: write failed", o->output);
            fmt::print(stderr, "wrote {} records to {}\n", t.size(), o->output);
            return 0;
        }
        if (imp->parsed()) {
            JsonlImportOptions io;
            TraceHeader mh;
            if (!o->model.empty()) {
                mh = header_from_options(*o, false);
                io.model = &mh;
            }
            io.n_layer = o->n_layer;
            io.n_expert = o->n_expert;
            const Trace t = import_jsonl_file(o->input, io);
            write_trace(o->output, t, TraceWriterOptions{o->chunk});
            fmt::print(stderr, "wrote {} records ({} layers x {} experts, top-{}) to {}\n", t.size(), t.header.n_layer,
                       t.header.n_expert, t.header.n_expert_used, o->output);
            return 0;
        }
        if (syn->parsed()) {
            const TraceHeader h = header_from_options(*o, true);
            SynthOptions so = o->synth;
            so.weights = !o->no_weights;
            const Trace t = synth_trace(h, so);
            write_trace(o->output, t, TraceWriterOptions{o->chunk});
            fmt::print(stderr, "wrote {} synthetic records ({} layers x {} experts, top-{}, seed {}) to {}\n", t.size(),
                       h.n_layer, h.n_expert, h.n_expert_used, so.seed, o->output);
            return 0;
        }
        return 1;
    };
}

}  // namespace nitro::cli
