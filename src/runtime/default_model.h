// The embedded default model (models/tiny-moe-pystd.gguf, see models/README.md): what `nitro run`
// and `nitro serve` use when no -m is given.
#pragma once

#include <string>

namespace nitro {

/// Path of the default model: next to the binary's checkout (`<exe>/../models/...` or
/// `<exe>/../../models/...`), else the source tree the binary was built from. Throws
/// nitro::Error listing the places looked at if none holds the file.
std::string default_model_path();

}  // namespace nitro
