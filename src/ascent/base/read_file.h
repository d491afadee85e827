// A whole file read into a string: the text and JSON inputs (prompts, corpora, configs, vocabularies) and the tokenizer
// files an Ascent file embeds. An std::ifstream opens a directory and then reads nothing. So a directory named where a
// file is wanted would read as an empty text (tokenize would print nothing, perplexity say "fewer than 2 tokens", the
// JSON readers "empty input"); it is refused by name.
#pragma once

#include <string>

namespace ascent {

// Throws ascent::Error "PATH: cannot open: REASON", "PATH: is a directory, expected a file" or
// "PATH: read failed: REASON".
std::string read_file(const std::string& path);

}  // namespace ascent
