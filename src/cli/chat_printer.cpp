#include "cli/chat_printer.h"

namespace nitro::cli {

namespace {
constexpr const char* kDim = "\x1b[2m";
constexpr const char* kReset = "\x1b[0m";
}  // namespace

std::string ChatPrinter::text(const std::string& s) {
    if (!s.empty()) line_start_ = s.back() == '\n';
    return s;
}

std::string ChatPrinter::switch_to(Part p) {
    if (p == part_) return "";
    std::string out;
    if (part_ == Part::REASONING && terminal_) out += kReset;
    // Each part starts on a line of its own.
    if (part_ != Part::NONE && !line_start_) {
        out += "\n";
        line_start_ = true;
    }
    if (p == Part::REASONING && terminal_) out += kDim;
    part_ = p;
    return out;
}

std::string ChatPrinter::delta(const ChatDelta& d) {
    switch (d.kind) {
        case ChatDelta::Kind::REASONING: {
            std::string out = switch_to(Part::REASONING);
            return out + text(d.text);
        }
        case ChatDelta::Kind::CONTENT: {
            std::string out = switch_to(Part::CONTENT);
            return out + text(d.text);
        }
        case ChatDelta::Kind::TOOL_CALL_BEGIN: {
            std::string out = switch_to(Part::TOOL);
            if (!line_start_) out += "\n";
            return out + text("[tool call " + d.name + "] ");
        }
        case ChatDelta::Kind::TOOL_CALL_ARGUMENTS: {
            std::string out = switch_to(Part::TOOL);
            return out + text(d.text);
        }
    }
    return "";
}

std::string ChatPrinter::end() {
    std::string out;
    if (part_ == Part::REASONING && terminal_) out += kReset;
    if (!line_start_) out += "\n";
    part_ = Part::NONE;
    line_start_ = true;
    return out;
}

}  // namespace nitro::cli
