// How `nitro chat` writes a reply: the parsed deltas of the model's output (tokenizer/chat_parse.h)
// as terminal text. Reasoning (gpt-oss analysis channel, Qwen3 <think>) is shown dim (ANSI SGR 2)
// on a terminal and plain elsewhere, set off from the answer by a line break; a tool call is shown
// as "[tool call NAME] ARGUMENTS".
#pragma once

#include "tokenizer/chat_parse.h"

#include <string>

namespace nitro::cli {

class ChatPrinter {
public:
    /// `terminal`: stdout is a terminal (ANSI codes allowed).
    explicit ChatPrinter(bool terminal) : terminal_(terminal) {}
    /// The bytes to write for one delta.
    std::string delta(const ChatDelta& d);
    /// The bytes that end a reply: the dim attribute reset, a final line break.
    std::string end();

private:
    enum class Part { NONE, REASONING, CONTENT, TOOL };
    std::string switch_to(Part p);
    std::string text(const std::string& s);
    bool terminal_;
    Part part_ = Part::NONE;
    bool line_start_ = true;
};

}  // namespace nitro::cli
