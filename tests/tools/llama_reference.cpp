// What llama.cpp computes for a GGUF file, for the import tests to compare with:
//   llama-reference MODEL N_GREEDY TOKEN_ID...
// prints one JSON object: the arg-max token after every prompt position ("argmax"), the logits
// after the last prompt token ("last_logits") and N_GREEDY tokens of greedy continuation
// ("greedy"). Built against llama.cpp's library by scripts/build_llama_tools.sh; test tool only.
#include "llama.h"

#include <cstdio>
#include <cstdlib>
#include <vector>

static void quiet(ggml_log_level, const char *, void *) {}

static int argmax(const float * logits, int n_vocab) {
    int best = 0;
    for (int i = 1; i < n_vocab; i++) {
        if (logits[i] > logits[best]) best = i;
    }
    return best;
}

int main(int argc, char ** argv) {
    if (argc < 4) {
        std::fprintf(stderr, "usage: %s MODEL N_GREEDY TOKEN_ID...\n", argv[0]);
        return 2;
    }
    llama_log_set(quiet, nullptr);
    llama_backend_init();
    const int n_greedy = std::atoi(argv[2]);
    std::vector<llama_token> prompt;
    for (int i = 3; i < argc; i++) prompt.push_back(std::atoi(argv[i]));
    const int n_prompt = (int) prompt.size();

    llama_model_params model_params = llama_model_default_params();
    llama_model * model = llama_model_load_from_file(argv[1], model_params);
    if (model == nullptr) {
        std::fprintf(stderr, "cannot load %s\n", argv[1]);
        return 1;
    }
    llama_context_params ctx_params = llama_context_default_params();
    ctx_params.n_ctx = n_prompt + n_greedy + 16;
    ctx_params.n_batch = n_prompt > 512 ? n_prompt : 512;
    ctx_params.n_ubatch = ctx_params.n_batch;
    ctx_params.n_threads = 2;
    ctx_params.n_threads_batch = 2;
    // A float32 cache: the reference should differ from the import by llama.cpp's weight
    // formats, not by a float16 copy of every key and value.
    ctx_params.type_k = GGML_TYPE_F32;
    ctx_params.type_v = GGML_TYPE_F32;
    llama_context * ctx = llama_init_from_model(model, ctx_params);
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));

    llama_batch batch = llama_batch_init(n_prompt, 0, 1);
    for (int i = 0; i < n_prompt; i++) {
        batch.token[i] = prompt[i];
        batch.pos[i] = i;
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = 1;
    }
    batch.n_tokens = n_prompt;
    if (llama_decode(ctx, batch) != 0) {
        std::fprintf(stderr, "decode failed\n");
        return 1;
    }
    std::printf("{\"argmax\": [");
    for (int i = 0; i < n_prompt; i++) {
        std::printf("%s%d", i ? ", " : "", argmax(llama_get_logits_ith(ctx, i), n_vocab));
    }
    std::printf("], \"last_logits\": [");
    const float * last = llama_get_logits_ith(ctx, n_prompt - 1);
    for (int i = 0; i < n_vocab; i++) std::printf("%s%.7g", i ? ", " : "", last[i]);
    std::printf("], \"greedy\": [");
    llama_token next = argmax(last, n_vocab);
    for (int i = 0; i < n_greedy; i++) {
        std::printf("%s%d", i ? ", " : "", next);
        llama_batch one = llama_batch_get_one(&next, 1);
        if (llama_decode(ctx, one) != 0) break;
        next = argmax(llama_get_logits_ith(ctx, -1), n_vocab);
    }
    std::printf("]}\n");
    llama_batch_free(batch);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
