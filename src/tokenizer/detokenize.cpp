#include "tokenizer/detokenize.h"

#include "tokenizer/bpe.h"
#include "tokenizer/unicode.h"

namespace nitro {

std::string Utf8Stream::push(std::string_view bytes) {
    pending_.append(bytes);
    std::string out;
    size_t i = 0;
    while (i < pending_.size()) {
        if (static_cast<uint8_t>(pending_[i]) < 0x80) {
            size_t j = i;
            while (j < pending_.size() && static_cast<uint8_t>(pending_[j]) < 0x80) ++j;
            out.append(pending_, i, j - i);
            i = j;
            continue;
        }
        Utf8Step st = utf8_step(std::string_view(pending_).substr(i));
        if (st.kind == Utf8Step::Kind::INCOMPLETE) break;  // wait for more bytes
        if (st.kind == Utf8Step::Kind::OK) out.append(pending_, i, st.len);
        else out.append("\xEF\xBF\xBD");
        i += st.len;
    }
    pending_.erase(0, i);
    return out;
}

std::string Utf8Stream::flush() {
    std::string out = pending_.empty() ? std::string() : std::string("\xEF\xBF\xBD");
    pending_.clear();
    return out;
}

std::string StreamingDetokenizer::push(int32_t id) {
    std::string bytes;
    const int32_t one[1] = {id};
    tok_->decode_bytes(one, bytes);
    return utf8_.push(bytes);
}

}  // namespace nitro
