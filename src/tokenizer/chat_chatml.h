// Qwen3 ChatML chat format: rendering, as the chat_template of Qwen3's tokenizer_config.json
// (shared/tokenizers/qwen3/tokenizer_config.json) does.
//
//   <|im_start|>system\nSYSTEM[\n\n# Tools ... <tools>\n{tool json}...\n</tools> ...]<|im_end|>\n
//   <|im_start|>user\n...<|im_end|>\n
//   <|im_start|>assistant\n[<think>\nREASONING\n</think>\n\n]CONTENT
//     [\n<tool_call>\n{"name": "NAME", "arguments": {...}}\n</tool_call>]...<|im_end|>\n
//   <|im_start|>user\n<tool_response>\nRESULT\n</tool_response>[\n<tool_response>...]<|im_end|>\n
//   <|im_start|>assistant\n[<think>\n\n</think>\n\n]              (generation prompt)
// Reasoning is kept only for assistant turns after the last real user query.
#pragma once

#include "tokenizer/chat.h"

#include <string>

namespace nitro {

/// Renders `messages` and `tools` like the Qwen3 template. Throws nitro::Error where the
/// template raises. Used through render_chat_marked().
RenderedChat render_chatml(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                           const ChatOptions& opt);

}  // namespace nitro
