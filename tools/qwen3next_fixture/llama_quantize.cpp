// llama.cpp's own quantizer (llama_model_quantize of node-llama-cpp's prebuilt libllama, llama.cpp
// 80fb11a) with the tensor types the qwen3next test fixture uses: the file type Q8_0 (every 2-D
// and 3-D weight llama.cpp quantizes: attention, DeltaNet projections, experts, shared expert),
// token_embd and output Q4_0; norms, routers, conv kernels and 1-D tensors stay F32.
// Build and use: tools/qwen3next_fixture/make_fixture.sh (no source of llama.cpp is copied here).
#include "llama.h"

#include <cstdio>

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: %s IN.gguf OUT.gguf\n", argv[0]);
        return 2;
    }
    llama_backend_init();
    llama_model_quantize_params p = llama_model_quantize_default_params();
    p.nthread = 2;
    p.ftype = LLAMA_FTYPE_MOSTLY_Q8_0;
    p.output_tensor_type = GGML_TYPE_Q4_0;
    p.token_embedding_type = GGML_TYPE_Q4_0;
    const uint32_t rc = llama_model_quantize(argv[1], argv[2], &p);
    llama_backend_free();
    if (rc != 0) std::fprintf(stderr, "llama_model_quantize failed (%u)\n", rc);
    return rc == 0 ? 0 : 1;
}
