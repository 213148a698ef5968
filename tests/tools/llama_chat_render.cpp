// What llama.cpp's chat layer renders for a conversation, for the family template tests to compare
// with: the same path llama-server takes for /apply-template and /v1/chat/completions
// (common_chat_msgs_parse_oaicompat -> common_chat_templates_apply with --jinja).
//   llama-chat-render < requests.jsonl
// Each input line is one JSON object {"template", "bos", "eos", "messages", "tools",
// "kwargs"}; each output line is {"prompt": text} or {"error": message}. Many requests go through
// one process, so a test file pays the start-up once. Built against llama.cpp's common library by
// scripts/build_llama_tools.sh; test tool only.
#include "chat.h"
#include "log.h"

#include <iostream>
#include <string>

static common_json render(const common_json & request) {
    const std::string bos = request.value("bos", std::string());
    const std::string eos = request.value("eos", std::string());
    auto templates = common_chat_templates_init(nullptr, request.at("template").get<std::string>(), bos, eos);
    common_chat_templates_inputs inputs;
    inputs.messages = common_chat_msgs_parse_oaicompat(request.at("messages"));
    if (request.contains("tools")) {
        inputs.tools = common_chat_tools_parse_oaicompat(request.at("tools"));
    }
    inputs.add_generation_prompt = true;
    inputs.use_jinja = true;
    // The server's defaults: thinking on, reasoning parsed apart ("auto").
    inputs.reasoning_format = COMMON_REASONING_FORMAT_AUTO;
    if (request.contains("kwargs")) {
        // Template variables as llama-server's chat_template_kwargs: JSON text per name.
        for (const auto & [key, value] : request.at("kwargs").items()) {
            inputs.chat_template_kwargs[key] = value.dump();
        }
        if (request.at("kwargs").contains("enable_thinking")) {
            inputs.enable_thinking = request.at("kwargs").at("enable_thinking").get<bool>();
        }
    }
    const auto params = common_chat_templates_apply(templates.get(), inputs);
    return common_json::object({{"prompt", params.prompt}});
}

int main() {
    common_log_set_verbosity_thold(-1);  // llama.cpp's warnings would interleave with the answers
    std::string line;
    while (std::getline(std::cin, line)) {
        common_json answer;
        try {
            answer = render(common_json::parse(line));
        } catch (const std::exception & e) {
            answer = common_json::object({{"error", std::string(e.what())}});
        }
        std::cout << answer.dump() << "\n" << std::flush;
    }
    return 0;
}
