// The Jinja parser (tokenizer/jinja_parse.cc): the input is a template's source.
#include "fuzz_common.h"

#include "ascent/tokenizer/jinja.h"

using namespace ascent;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::init();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string source(reinterpret_cast<const char*>(data), size);
  fuzz::refused([&] { const tokenizer::jinja::Template t(source); });
  return 0;
}
