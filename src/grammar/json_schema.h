// JSON Schema -> grammar nodes (grammar.h), for response_format's json_schema.
//
// Supported (what OpenAI's structured outputs accept, plus string lengths), per schema:
//   type: "object" | "array" | "string" | "number" | "integer" | "boolean" | "null", or a list of them
//   object:  properties, required, additionalProperties (false / true / a schema when there are no
//            properties: a map). Properties are produced in the order they are declared; optional
//            ones may be left out. Keys beyond `properties` are never produced.
//   array:   items, minItems, maxItems (uniqueItems: false)
//   string:  minLength, maxLength (characters)
//   enum, const (any JSON values), anyOf, allOf with one schema, $ref to "#" or "#/..." (e.g.
//   "#/$defs/Name"; recursion allowed), $defs / definitions, boolean schemas true / false,
//   and the annotations $schema, $id, $comment, title, description, examples, default,
//   deprecated, readOnly, writeOnly.
// A schema without `type` takes its type from its keywords (properties -> object, items ->
// array, minLength -> string) or allows any value.
// Everything else (pattern, format, minimum, maximum, multipleOf, oneOf, not, if/then/else,
// prefixItems, patternProperties, ...) is refused with a SchemaError naming the keyword and
// where it is, never ignored: the output would not be guaranteed to validate.
#pragma once

#include "core/error.h"
#include "grammar/grammar.h"

#include <nlohmann/json.hpp>

#include <string>

namespace nitro::grammar {

/// A schema this server cannot enforce, or one that is not a valid schema. what() names the
/// keyword and its JSON pointer in the schema ("#/properties/when").
class SchemaError : public Error {
public:
    SchemaError(const std::string& message, std::string keyword, std::string path, bool unsupported = false)
        : Error(message), keyword(std::move(keyword)), path(std::move(path)), unsupported(unsupported) {}
    std::string keyword;  ///< the offending keyword ("" when it is the schema as a whole)
    std::string path;     ///< JSON pointer of the schema holding it
    bool unsupported;     ///< a valid schema this server cannot enforce (else: not a valid or satisfiable schema)
};

/// Limits on what one schema may compile to.
inline constexpr size_t kMaxSchemaNodes = 20000;
inline constexpr size_t kMaxLiteralBytes = 1u << 20;

/// Compiles `schema` into nodes of `g` and returns the root node. Throws SchemaError for an
/// unsupported keyword, an invalid schema, a $ref that does not resolve, or a schema no finite
/// JSON value satisfies.
uint32_t compile_json_schema(const nlohmann::ordered_json& schema, Grammar& g);

/// The literal JSON text a value is matched as (compact, UTF-8, nlohmann's escapes).
std::string literal_text(const nlohmann::ordered_json& v);

}  // namespace nitro::grammar
