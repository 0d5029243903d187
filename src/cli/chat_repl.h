// `nitro chat` (and `nitro run -cnv` / `-i`): a multi-turn conversation in the terminal, in the
// model's chat format (harmony for gpt-oss, ChatML for Qwen), the reply streamed as it is
// generated, the reasoning dim on a terminal (cli/chat_printer.h).
//
// Every turn renders the whole conversation and hands it to the server's scheduler
// (server/scheduler.h), which keeps the K/V cache of the previous turns and evaluates only what
// changed (the same prefix reuse as `nitro serve`). Commands at the prompt: /reset (forget the
// conversation), /stats (the last reply's tokens, cached tokens, TTFT, tok/s, context use), /help,
// /exit. A line ending in \ continues on the next. Ctrl-C stops a reply; Ctrl-D (end of input) or
// Ctrl-C at the prompt quits.
#pragma once

#include "runtime/generate.h"

namespace nitro::cli {

/// Runs the conversation until the end of input. opt.prompt / opt.prompt_file: the first user
/// message; opt.system_prompt: the system message; opt.n_predict: most tokens per reply (< 0: to
/// the end of the turn or a full context). Returns the exit status.
int run_chat(const GenerateOptions& opt);

}  // namespace nitro::cli
