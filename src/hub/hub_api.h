// The two Hugging Face Hub API calls a pull needs, and what their error answers mean to a user.
//   GET /api/models/REPO/revision/main                  -> {"sha": COMMIT, ...}
//   GET /api/models/REPO/tree/COMMIT?recursive=true     -> [{"type": "file", "path", "size", "oid",
//                                                            "lfs": {"oid": SHA256, "size"}}, ...]
// (pages joined through the `Link: <...>; rel="next"` header, as huggingface_hub's paginate() does).
#pragma once

#include "hub/http_client.h"
#include "hub/hub.h"

#include <string>
#include <vector>

namespace nitro::hub {

struct RepoListing {
    std::string commit;
    std::vector<RepoFile> files;
};

/// The files of `repo` at main. Throws nitro::Error for an answer that says no (unknown
/// repository, no access: fail_http) and NetworkError when the Hub cannot be reached or answers
/// 5xx/429 (the caller may then use its cache).
RepoListing fetch_listing(const std::string& repo, const HubConfig& cfg);

/// Throws nitro::Error for an HTTP error answer to a request about `repo` (`what` names the
/// request: "the file X"), saying what to do: HF_TOKEN for a private or gated repository, accepting
/// its license, checking the name.
[[noreturn]] void fail_http(const HttpResponse& r, const std::string& what, const std::string& repo, const HubConfig& cfg);

/// The request options (token, Accept) for the Hub.
HttpOptions hub_http_options(const HubConfig& cfg, const std::string& accept = "");

}  // namespace nitro::hub
