#include "cli/chat_repl.h"

#include "cli/chat_printer.h"
#include "core/error.h"
#include "core/text.h"
#include "core/user_file.h"
#include "runtime/default_model.h"
#include "server/metrics.h"
#include "server/scheduler.h"
#include "tokenizer/bpe.h"
#include "tokenizer/chat.h"
#include "tokenizer/chat_parse.h"

#include <fmt/format.h>

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <iostream>
#include <mutex>

namespace nitro::cli {

namespace {

using server::FinishCause;
using server::JobStats;

std::atomic<bool> g_interrupted{false};
void on_sigint(int) { g_interrupted = true; }

void write_out(const std::string& s) {
    if (s.empty()) return;
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
}

/// Receives one reply's tokens in the scheduler's thread: parses them into deltas and prints them.
class ReplySink : public server::TokenSink {
public:
    ReplySink(const Tokenizer& tok, ChatFormat format, const ChatParseOptions& parse, bool terminal)
        : parser_(tok, format, parse), printer_(terminal) {}

    bool on_token(const server::TokenStep& step) override {
        if (step.end_of_generation) return true;  // the end marker is not part of the reply
        for (const ChatDelta& d : parser_.push(step.id)) write_out(printer_.delta(d));
        return true;
    }
    void on_finish(FinishCause cause, const JobStats& stats, const std::string& error) override {
        for (const ChatDelta& d : parser_.finish()) write_out(printer_.delta(d));
        write_out(printer_.end());
        std::lock_guard<std::mutex> lk(mu_);
        cause_ = cause;
        stats_ = stats;
        error_ = error;
        done_ = true;
        cv_.notify_all();
    }
    /// Waits up to 50 ms for the end of the reply; true when it ended.
    bool wait() {
        std::unique_lock<std::mutex> lk(mu_);
        return cv_.wait_for(lk, std::chrono::milliseconds(50), [&] { return done_; });
    }
    // Valid once wait() returned true.
    FinishCause cause() const { return cause_; }
    const JobStats& stats() const { return stats_; }
    const std::string& error() const { return error_; }
    const ParsedMessage& message() const { return parser_.message(); }

private:
    ChatTokenParser parser_;
    ChatPrinter printer_;
    std::mutex mu_;
    std::condition_variable cv_;
    bool done_ = false;
    FinishCause cause_ = FinishCause::CANCELLED;
    JobStats stats_;
    std::string error_;
};

/// One line of input; a line ending in \ goes on with the next. False at the end of input or on
/// Ctrl-C at the prompt.
bool read_message(std::string& out) {
    out.clear();
    for (bool first = true;; first = false) {
        write_out(first ? "> " : ". ");
        std::string line;
        if (!std::getline(std::cin, line)) {
            std::cin.clear();
            return false;
        }
        if (!line.empty() && line.back() == '\\') {
            line.pop_back();
            out += line + "\n";
            continue;
        }
        out += line;
        return true;
    }
}

class ChatLoop {
public:
    ChatLoop(const GenerateOptions& opt, const Tokenizer& tok, ChatFormat format, server::Scheduler& sched)
        : opt_(opt), tok_(tok), format_(format), sched_(sched), terminal_(isatty(STDOUT_FILENO)) {
        reset();
    }

    void reset() {
        messages_ = nlohmann::ordered_json::array();
        if (!opt_.system_prompt.empty()) messages_.push_back({{"role", "system"}, {"content", opt_.system_prompt}});
    }

    /// One user message and the reply to it.
    void turn(const std::string& text) {
        messages_.push_back({{"role", "user"}, {"content", text}});
        ChatOptions copt;
        copt.date = chat_date_today();
        const RenderedChat rc = render_chat_marked(format_, messages_, nullptr, copt);
        ChatParseOptions parse;
        parse.reasoning_open = format_ == ChatFormat::CHATML &&
                               (rc.text.ends_with("<think>\n") || rc.text.ends_with("<think>"));
        auto job = std::make_shared<server::Job>();
        job->prompt = encode_chat(tok_, rc);
        job->sampling = opt_.sampling;
        job->max_tokens = opt_.n_predict < 0 ? -1 : opt_.n_predict;
        job->ignore_eos = false;
        auto sink = std::make_shared<ReplySink>(tok_, format_, parse, terminal_);
        job->sink = sink;
        const int64_t n_prompt = static_cast<int64_t>(job->prompt.size());
        g_interrupted = false;
        sched_.submit(job);
        bool stopped = false;
        while (!sink->wait())
            if (g_interrupted.exchange(false) && !stopped) {
                sched_.cancel(job);
                stopped = true;
            }
        last_ = sink->stats();
        has_last_ = true;
        const ParsedMessage& m = sink->message();
        switch (sink->cause()) {
            case FinishCause::ERROR:
                messages_.erase(messages_.end() - 1);  // the message was not answered
                std::fprintf(stderr, "error: %s; /reset starts over, a larger -c holds more\n", sink->error().c_str());
                return;
            case FinishCause::LENGTH:  // at -n (asked for: nothing to say), or at a full context
                if (n_prompt + last_.n_generated >= sched_.n_ctx())
                    std::fprintf(stderr, "[the context of %lld tokens is full: /reset starts over, a larger -c holds more]\n",
                                 static_cast<long long>(sched_.n_ctx()));
                break;
            case FinishCause::CANCELLED:
                std::fprintf(stderr, "[stopped]\n");
                break;
            default:
                break;
        }
        // The reply as the model wrote it (its reasoning too: the template decides what it keeps).
        nlohmann::ordered_json reply = {{"role", "assistant"}, {"content", m.content}};
        if (!m.reasoning_content.empty()) reply["reasoning_content"] = m.reasoning_content;
        messages_.push_back(reply);
    }

    void print_stats() const {
        if (!has_last_) {
            std::printf("no reply yet\n");
            return;
        }
        const JobStats& s = last_;
        const int64_t used = s.n_prompt + s.n_generated;
        std::string line = fmt::format("last reply: prompt {} ({} cached, {} evaluated), reply {}",
                                       count_noun(s.n_prompt, "token"), s.n_reused, s.n_prompt - s.n_reused,
                                       count_noun(s.n_generated, "token"));
        if (s.n_generated > 0) line += fmt::format(", TTFT {:.1f} ms", s.queue_ms + s.prompt_ms);
        if (s.n_generated > 1 && s.decode_ms > 0)
            line += fmt::format(", {:.1f} tok/s", 1000.0 * static_cast<double>(s.n_generated - 1) / s.decode_ms);
        line += fmt::format("; context {} of {} tokens; {} in the conversation", used, sched_.n_ctx(),
                            count_noun(static_cast<long long>(messages_.size()), "message"));
        std::printf("%s\n", line.c_str());
        std::fflush(stdout);
    }

private:
    const GenerateOptions& opt_;
    const Tokenizer& tok_;
    ChatFormat format_;
    server::Scheduler& sched_;
    bool terminal_;
    nlohmann::ordered_json messages_;
    JobStats last_;
    bool has_last_ = false;
};

const char* kHelp = "/reset forgets the conversation, /stats shows the last reply's figures, /exit quits (or Ctrl-D); "
                    "end a line with \\ to go on with the next; Ctrl-C stops a reply";

}  // namespace

int run_chat(const GenerateOptions& opt) {
    Model model(opt.model.empty() ? default_model_path() : opt.model);
    const Tokenizer tok = Tokenizer::from_gguf(model.gguf().metadata());
    ChatFormat format;
    try {
        format = chat_format_for(tok.vocab());
    } catch (const Error&) {
        fail("{}: the vocabulary has no chat format nitro knows (harmony, ChatML), so it cannot hold a conversation; "
             "use nitro run -p TEXT for a completion",
             model.path());
    }
    std::string first = opt.prompt;
    if (!opt.prompt_file.empty()) first = read_user_file(opt.prompt_file, "-f");

    // Ctrl-C: the scheduler's and the engine's threads inherit a blocked SIGINT, so only this
    // thread takes it (a reply stops; at the prompt, the read ends).
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
    server::Metrics metrics;
    server::SchedulerOptions so;
    so.session = opt.session;
    so.end_of_generation = end_of_generation_tokens(model, tok);
    so.mode = opt.mode;
    so.gpu = opt.gpu;
    so.n_slots = 1;
    server::Scheduler sched(model, so, metrics);
    pthread_sigmask(SIG_UNBLOCK, &sigs, nullptr);
    struct sigaction sa {};
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;  // no SA_RESTART: a read at the prompt ends
    sigaction(SIGINT, &sa, nullptr);
    if (opt.ctx_given && opt.session.n_ctx > sched.n_ctx())
        std::fprintf(stderr, "warning: -c %lld is above the model's training context; using %lld tokens\n",
                     static_cast<long long>(opt.session.n_ctx), static_cast<long long>(sched.n_ctx()));
    if (opt.on_engine_ready) opt.on_engine_ready(model);
    std::fprintf(stderr, "nitro chat: %s (%s chat format), context %lld tokens, %s\n%s\n", model.path().c_str(),
                 chat_format_name(format), static_cast<long long>(sched.n_ctx()), sched.placement().c_str(), kHelp);

    ChatLoop chat(opt, tok, format, sched);
    if (!first.empty()) {
        write_out("> " + first + "\n");
        chat.turn(first);
    }
    std::string line;
    while (read_message(line)) {
        if (line.empty()) continue;
        if (line == "/exit" || line == "/quit") return 0;
        if (line == "/reset") {
            chat.reset();
            std::printf("conversation reset\n");
            continue;
        }
        if (line == "/stats") {
            chat.print_stats();
            continue;
        }
        if (line == "/help" || line == "/?") {
            std::printf("%s\n", kHelp);
            continue;
        }
        if (line[0] == '/' && line.find(' ') == std::string::npos) {
            std::printf("unknown command %s; %s\n", line.c_str(), kHelp);
            continue;
        }
        chat.turn(line);
    }
    write_out("\n");  // the prompt's line ends
    return 0;
}

}  // namespace nitro::cli
