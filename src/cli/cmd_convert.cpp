// nitro convert HF_DIR -o OUT.gguf [--chat-template FILE] [--name NAME] [--expert-type mxfp4]
#include "arch/convert_hf.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/user_file.h"

#include <fmt/format.h>

#include <cstdio>
#include <memory>

namespace nitro::cli {

Action add_convert(CLI::App& app) {
    auto o = std::make_shared<ConvertHfOptions>();
    auto expert = std::make_shared<std::string>("mxfp4");
    auto quiet = std::make_shared<bool>(false);
    CLI::App* sub = app.add_subcommand(
        "convert", "Convert a Hugging Face gpt-oss checkpoint (safetensors, bf16/f16/f32) to GGUF as llama.cpp names it");
    sub->add_option("input", o->in_dir, "Folder with config.json, model*.safetensors and tokenizer.json")->required();
    sub->add_option("-o,--output", o->out, "Output GGUF file")->required();
    sub->add_option("--name", o->name, "general.name (default: the folder's name)");
    sub->add_option("--chat-template", o->chat_template, "Jinja file stored as tokenizer.chat_template");
    sub->add_option("--expert-type", *expert, "Weight type of the routed experts (mxfp4, q8_0, f16, ...)")->capture_default_str();
    sub->add_option("--license", [o](const std::vector<std::string>& v) {
        o->extra_strings.emplace_back("license", v.at(0));
        return true;
    }, "general.license")->type_name("TEXT");
    sub->add_flag("-q,--quiet", *quiet, "Do not list the tensors");
    return [o, expert, quiet]() {
        const auto t = type_from_name(*expert);
        if (!t) fail("nitro convert: unknown weight type '{}'", *expert);
        o->expert_type = *t;
        if (!o->chat_template.empty()) check_user_file(o->chat_template, "--chat-template");
        std::function<void(const std::string&)> log;
        if (!*quiet) log = [](const std::string& s) { std::puts(s.c_str()); };
        const ConvertHfResult r = convert_hf_gptoss(*o, log);
        std::printf("wrote %s: %lld tensors, %llu bytes, %lld tokens\n", o->out.c_str(),
                    static_cast<long long>(r.n_tensors), static_cast<unsigned long long>(r.file_bytes),
                    static_cast<long long>(r.n_vocab));
        return 0;
    };
}

}  // namespace nitro::cli
