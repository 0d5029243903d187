// gpt-oss "harmony" chat format: rendering, as openai/gpt-oss-20b chat_template.jinja does
// (shared/tokenizers/gptoss/chat_template.jinja, sha256 a4c9919c...).
//
//   <|start|>system<|message|>IDENTITY\nKnowledge cutoff...\nCurrent date: DATE\n\nReasoning: E
//     \n\n[# Tools (builtin)]# Valid channels: ...<|end|>
//   [<|start|>developer<|message|># Instructions\n\nSYSTEM\n\n# Tools\n\n## functions ...<|end|>]
//   <|start|>user<|message|>...<|end|>
//   <|start|>assistant<|channel|>analysis<|message|>...<|end|>          (kept only before a
//                                                                         tool call not followed
//                                                                         by a final answer)
//   <|start|>assistant to=functions.NAME<|channel|>commentary json<|message|>{args}<|call|>
//   <|start|>functions.NAME to=assistant<|channel|>commentary<|message|>"result"<|end|>
//   <|start|>assistant<|channel|>final<|message|>...<|end|>   (<|return|> only for the last
//                                                             message when no generation prompt)
//   <|start|>assistant                                         (generation prompt)
#pragma once

#include "tokenizer/chat.h"

#include <string>

namespace nitro {

/// Renders `messages` and `tools` like the gpt-oss template. Throws nitro::Error where the
/// template raises. Used through render_chat_marked().
RenderedChat render_harmony(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                            const ChatOptions& opt);

/// The TypeScript-like type the gpt-oss template prints for a JSON-schema parameter
/// (its render_typescript_type macro, whitespace quirks included).
std::string harmony_typescript_type(const nlohmann::ordered_json& spec);

}  // namespace nitro
