// The flags of `nitro serve` that bound what clients may hold (docs/server.md, "Limits"): slow and
// idle connections (server/http_conn.h) and the memory of response_format grammars
// (grammar/grammar_budget.h). One table, so --help lists them together with their units.
#pragma once

#include "server/http_server.h"

#include <CLI/CLI.hpp>

namespace nitro::cli {

/// Adds --header-timeout, --body-timeout, --body-min-rate, --max-connections,
/// --max-connections-per-client, --grammar-memory and --grammar-memory-total to `sub`.
void add_serve_limit_flags(CLI::App* sub, server::ServerOptions& o);

/// The startup summary lines of those limits ("connections ...", "grammars ...").
std::string serve_limits_summary(const server::ServerOptions& o);

}  // namespace nitro::cli
