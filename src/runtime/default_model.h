// The embedded default model (models/tiny-moe-pystd.gguf, see models/README.md): what `nitro run`
// and `nitro serve` use when no -m is given.
#pragma once

#include <string>

namespace nitro {

/// Path of the default model: next to the binary's checkout (`<exe>/../models/...` or
/// `<exe>/../../models/...`), else the source tree the binary was built from. Throws
/// nitro::Error listing the places looked at if none holds the file.
std::string default_model_path();

/// Path of a file of the checkout, `relative` to its root (e.g. "bench/traces/gpt-oss-20b.nmtr"),
/// looked for where default_model_path looks; "" when none holds it (the places looked at are
/// appended to *looked, comma-separated, when given).
std::string find_in_checkout(const std::string& relative, std::string* looked = nullptr);

}  // namespace nitro
