"""ModelFamily.tool_syntax, and the families of 2026 seeded (or brought up to date by slug)
from their real chat templates."""

import django.db.models.deletion
import inference.adapters.toolcalls.registry
from django.db import migrations, models

THINK = {"reasoning_start": "<think>", "reasoning_end": "</think>"}
IM_END = ["<|im_end|>"]
# Every marker, stop token and switch below is what the family's own chat template writes
# (llama.cpp's models/templates; Llama 4's as transformers ships it). A row the admin edited
# is overwritten by slug, as the earlier seeds do; chat_template is never touched.
FAMILIES = [
    # Qwen: the template's tool prompt tells the XML models (<function=…>) from Hermes JSON.
    {
        "slug": "qwen3-5",
        "name": "Qwen3.5",
        "adapter": "chatml",
        "tool_syntax": "qwen3_xml",
        "priority": 11,
        "name_patterns": [r"qwen3\.5"],
        "model_types": ["qwen3_5", "qwen3_5_moe"],
        "extra_stop_tokens": IM_END,
        # Its generation prompt opens <think> unless enable_thinking is false.
        "reasoning_in_prompt": True,
        "thinking_switch": "enable_thinking",
        **THINK,
    },
    {
        "slug": "qwen3-coder",
        "name": "Qwen3-Coder",
        "adapter": "chatml",
        "tool_syntax": "qwen3_xml",
        "priority": 12,
        "name_patterns": [r"qwen3[-_ ]?coder"],
        "model_types": [],
        "extra_stop_tokens": IM_END,
    },
    {
        "slug": "qwq",
        "name": "QwQ",
        "adapter": "chatml",
        "tool_syntax": "hermes",
        "priority": 14,
        "name_patterns": ["qwq"],
        "model_types": [],
        "extra_stop_tokens": IM_END,
        # Its template always ends the prompt in <think>; nothing switches it off.
        "reasoning_in_prompt": True,
        **THINK,
    },
    {
        "slug": "qwen3",
        "name": "Qwen3 (hybrid thinking)",
        "adapter": "chatml",
        "tool_syntax": "hermes",
        "priority": 15,
        "name_patterns": ["qwen3"],
        "model_types": ["qwen3", "qwen3_moe"],
        "extra_stop_tokens": IM_END,
        "thinking_switch": "enable_thinking",
        **THINK,
    },
    {
        "slug": "chatml",
        "name": "ChatML / Qwen 2.5",
        "adapter": "chatml",
        "tool_syntax": "hermes",
        "priority": 20,
        "name_patterns": ["qwen", "smollm", "chatml"],
        "model_types": ["qwen2", "qwen2_moe", "qwen3", "qwen3_moe"],
        "extra_stop_tokens": IM_END,
    },
    {
        # Before Llama (10): "Hermes-3-Llama-3.1-8B" is Hermes's ChatML, not Llama's format.
        "slug": "hermes",
        "name": "Hermes 2 / 3",
        "adapter": "chatml",
        "tool_syntax": "hermes",
        "priority": 8,
        "name_patterns": ["hermes"],
        "model_types": [],
        "extra_stop_tokens": IM_END,
    },
    {
        "slug": "smollm3",
        "name": "SmolLM3",
        "adapter": "chatml",
        "tool_syntax": "hermes",
        "priority": 16,
        "name_patterns": ["smollm3"],
        "model_types": ["smollm3"],
        "extra_stop_tokens": IM_END,
        # enable_thinking picks "/think" or "/no_think"; the model opens <think> itself.
        "thinking_switch": "enable_thinking",
        **THINK,
    },
    # GLM: <|user|> and <|observation|> open the next turn; 4.5 / 4.6 let the model open
    # <think>, 4.7 opens it in the prompt.
    {
        "slug": "glm-4-5",
        "name": "GLM-4.5 / 4.6",
        "adapter": "default",
        "tool_syntax": "glm",
        "priority": 22,
        "name_patterns": [r"glm[-_ ]?4\.[56]"],
        "model_types": ["glm4_moe"],
        "extra_stop_tokens": ["<|user|>", "<|observation|>"],
        "thinking_switch": "enable_thinking",
        **THINK,
    },
    {
        "slug": "glm-4-7",
        "name": "GLM-4.7",
        "adapter": "default",
        "tool_syntax": "glm",
        "priority": 21,
        "name_patterns": [r"glm[-_ ]?4\.7"],
        "model_types": [],
        "extra_stop_tokens": ["<|user|>", "<|observation|>"],
        "reasoning_in_prompt": True,
        "thinking_switch": "enable_thinking",
        **THINK,
    },
    {
        # The harmony adapter reads the channels (analysis is the thinking) by itself.
        "slug": "gpt-oss",
        "name": "gpt-oss",
        "adapter": "harmony",
        "tool_syntax": "harmony",
        "priority": 6,
        "name_patterns": [r"gpt[-_ ]?oss"],
        "model_types": ["gpt_oss"],
        "extra_stop_tokens": ["<|return|>", "<|call|>"],
    },
    # DeepSeek: V3.1+ templates think only when `thinking` is true (off by default) and then
    # open <think> in the prompt. The row says the thinking is not opened there, because
    # serving/thinking.py takes an opened thinking for the model's default: said the other
    # way, every reply that did not ask would be read as all thinking.
    {
        "slug": "deepseek-v3",
        "name": "DeepSeek V3.1",
        "adapter": "default",
        "tool_syntax": "deepseek",
        "priority": 7,
        "name_patterns": [r"deepseek[-_ ]?v3\.1"],
        "model_types": [],
        "extra_stop_tokens": [],
        # Thinks only when asked; then its generation prompt opens <think>.
        "reasoning_in_prompt": True,
        "thinking_by_default": False,
        "thinking_switch": "thinking",
        **THINK,
    },
    {
        "slug": "deepseek-v3-2",
        "name": "DeepSeek V3.2 / V4 (DSML calls)",
        "adapter": "default",
        "tool_syntax": "deepseek_dsml",
        "priority": 6,
        "name_patterns": [r"deepseek[-_ ]?v(3\.2|4)"],
        "model_types": ["deepseek_v32"],
        "extra_stop_tokens": [],
        # Thinks only when asked; then its generation prompt opens <think>.
        "reasoning_in_prompt": True,
        "thinking_by_default": False,
        "thinking_switch": "thinking",
        **THINK,
    },
    {
        "slug": "deepseek-r1",
        "name": "DeepSeek-R1 and its distills",
        "adapter": "default",
        "tool_syntax": "deepseek",
        "priority": 5,
        "name_patterns": [r"deepseek[-_ ]?r1", r"r1[-_]distill"],
        "model_types": [],
        "extra_stop_tokens": [],
        "reasoning_in_prompt": True,
        **THINK,
    },
    # Kimi: <|im_end|> ends K2's turns, <|end_of_msg|> K3's; K3 thinks in <|open|>think tags
    # its prompt opens unless `thinking` is false.
    {
        "slug": "kimi-k2",
        "name": "Kimi K2",
        "adapter": "default",
        "tool_syntax": "kimi",
        "priority": 25,
        "name_patterns": [r"kimi[-_ ]?k2"],
        "model_types": ["kimi_k2"],
        "extra_stop_tokens": IM_END,
    },
    {
        "slug": "kimi-k2-thinking",
        "name": "Kimi K2 Thinking",
        "adapter": "default",
        "tool_syntax": "kimi",
        "priority": 24,
        "name_patterns": [r"kimi[-_ ]?k2.*thinking"],
        "model_types": [],
        "extra_stop_tokens": IM_END,
        **THINK,
    },
    {
        "slug": "kimi-k3",
        "name": "Kimi K3",
        "adapter": "default",
        "tool_syntax": "kimi",
        "priority": 23,
        "name_patterns": [r"kimi[-_ ]?k3"],
        "model_types": ["kimi_k3"],
        "extra_stop_tokens": ["<|end_of_msg|>"],
        "reasoning_start": "<|open|>think<|sep|>",
        "reasoning_end": "<|close|>think<|sep|>",
        "reasoning_in_prompt": True,
        "thinking_switch": "thinking",
    },
    {
        # Its prompt ends in <think>, always; [e~[ ends its turns.
        "slug": "minimax-m2",
        "name": "MiniMax M2",
        "adapter": "default",
        "tool_syntax": "minimax",
        "priority": 26,
        "name_patterns": [r"minimax[-_ ]?m2"],
        "model_types": ["minimax_m2"],
        "extra_stop_tokens": ["[e~["],
        "reasoning_in_prompt": True,
        **THINK,
    },
    # Mistral: [TOOL_CALLS]name[ARGS]{…} (Nemo's older [TOOL_CALLS][…] too); the reasoning
    # models write [THINK]…[/THINK] themselves (their default system prompt asks for it).
    {
        "slug": "mistral",
        "name": "Mistral (Small 3.2, Devstral, Nemo)",
        "adapter": "mistral",
        "tool_syntax": "mistral",
        "priority": 30,
        "name_patterns": ["mistral", "mixtral", "ministral", "devstral"],
        "model_types": ["mistral", "mixtral", "mistral3", "ministral3"],
        "extra_stop_tokens": [],
    },
    {
        "slug": "magistral",
        "name": "Magistral / Ministral 3 reasoning",
        "adapter": "mistral",
        "tool_syntax": "mistral",
        "priority": 29,
        "name_patterns": ["magistral", r"ministral[-_ ]?3.*reasoning"],
        "model_types": [],
        "extra_stop_tokens": [],
        "reasoning_start": "[THINK]",
        "reasoning_end": "[/THINK]",
    },
    {
        "slug": "llama",
        "name": "Llama 3.x",
        "adapter": "llama3",
        "tool_syntax": "llama3_json",
        "priority": 10,
        "name_patterns": [r"llama[-_ ]?3"],
        "model_types": ["llama"],
        "extra_stop_tokens": ["<|eot_id|>", "<|eom_id|>", "<|end_of_text|>"],
    },
    {
        # Its template prompts for {"name": …, "parameters": …} and writes past calls so.
        "slug": "llama4",
        "name": "Llama 4",
        "adapter": "default",
        "tool_syntax": "llama3_json",
        "priority": 9,
        "name_patterns": [r"llama[-_ ]?4(?!\d*b)"],
        "model_types": ["llama4", "llama4_text"],
        "extra_stop_tokens": ["<|eot|>"],
    },
    {
        # No tools in Gemma 2 / 3's templates: offered tools are written into the prompt in
        # Hermes's form (adapters/tools.py), so Hermes is what they answer in.
        "slug": "gemma",
        "name": "Gemma 2 / 3",
        "adapter": "gemma",
        "tool_syntax": "hermes",
        "priority": 40,
        "name_patterns": ["gemma"],
        "model_types": ["gemma", "gemma2", "gemma3", "gemma3_text"],
        "extra_stop_tokens": ["<end_of_turn>"],
    },
    {
        # Gemma 4 takes a system turn; thinking (off by default) is its <|channel>thought.
        "slug": "gemma4",
        "name": "Gemma 4",
        "adapter": "default",
        "tool_syntax": "gemma4",
        "priority": 39,
        "name_patterns": [r"gemma[-_ ]?4(?!\d*b)"],
        "model_types": ["gemma4", "gemma4_text"],
        "extra_stop_tokens": ["<turn|>", "<|tool_response>"],
        "reasoning_start": "<|channel>thought",
        "reasoning_end": "<channel|>",
        "thinking_switch": "enable_thinking",
    },
    {
        "slug": "granite",
        "name": "Granite 4",
        "adapter": "default",
        "tool_syntax": "hermes",
        "priority": 46,
        "name_patterns": [r"granite[-_ ]?4"],
        "model_types": ["granitemoehybrid"],
        "extra_stop_tokens": ["<|end_of_text|>"],
    },
    {
        # `thinking` asks for <think>…</think> then <response>…</response>.
        "slug": "granite3",
        "name": "Granite 3",
        "adapter": "default",
        "tool_syntax": "granite",
        "priority": 45,
        "name_patterns": [r"granite[-_ ]?3"],
        "model_types": ["granite", "granitemoe"],
        "extra_stop_tokens": ["<|end_of_text|>"],
        "thinking_switch": "thinking",
        **THINK,
    },
    {
        # /think and /no_think in the messages switch it; no template variable does.
        "slug": "nemotron-nano-v2",
        "name": "Nemotron Nano v2",
        "adapter": "default",
        "tool_syntax": "nemotron",
        "priority": 13,
        "name_patterns": [r"nemotron[-_ ]?nano.*v2"],
        "model_types": [],
        "extra_stop_tokens": ["<SPECIAL_12>"],
        "reasoning_in_prompt": True,
        **THINK,
    },
    {
        "slug": "nemotron3-nano",
        "name": "Nemotron 3 Nano",
        "adapter": "chatml",
        "tool_syntax": "qwen3_xml",
        "priority": 13,
        "name_patterns": [r"nemotron[-_ ]?3[-_ ]?nano"],
        "model_types": [],
        "extra_stop_tokens": IM_END,
        "reasoning_in_prompt": True,
        "thinking_switch": "enable_thinking",
        **THINK,
    },
    {
        "slug": "command-r",
        "name": "Command R / R7B",
        "adapter": "default",
        "tool_syntax": "command_r",
        "priority": 35,
        "name_patterns": [r"command[-_ ]?r", "c4ai"],
        "model_types": ["cohere", "cohere2"],
        "extra_stop_tokens": ["<|END_OF_TURN_TOKEN|>"],
        "reasoning_start": "<|START_THINKING|>",
        "reasoning_end": "<|END_THINKING|>",
        "thinking_switch": "enable_thinking",
    },
]
# Rows earlier migrations made: kept when this one is undone (only the new ones go).
EARLIER = {"llama", "chatml", "mistral", "gemma", "default", "qwen3", "deepseek-r1", "think"}
# What a field not named in a row goes back to, so that an updated row loses stale values.
BLANK = {
    "tool_syntax": "",
    "thinking_by_default": True,
    "reasoning_start": "",
    "reasoning_end": "",
    "reasoning_in_prompt": False,
    "thinking_switch": "",
}


def seed(apps, schema_editor):
    ModelFamily = apps.get_model("catalog", "ModelFamily")
    for family in FAMILIES:
        ModelFamily.objects.update_or_create(slug=family["slug"], defaults={**BLANK, **family})


def unseed(apps, schema_editor):
    ModelFamily = apps.get_model("catalog", "ModelFamily")
    added = [f["slug"] for f in FAMILIES if f["slug"] not in EARLIER]
    ModelFamily.objects.filter(slug__in=added).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("catalog", "0014_prompt_metadata_patterns"),
    ]

    operations = [
        migrations.AddField(
            model_name="modelfamily",
            name="thinking_by_default",
            field=models.BooleanField(
                default=True,
                help_text="Whether it thinks when a request does not say. Off (DeepSeek V3.1, V3.2): the switch is set off unless a request asks for thinking.",
            ),
        ),
        migrations.AddField(
            model_name="modelfamily",
            name="tool_syntax",
            field=models.CharField(
                blank=True,
                choices=inference.adapters.toolcalls.registry.syntax_choices,
                help_text="How the family writes tool calls (what its chat template shows for a call). Empty: the adapter's own (Hermes <tool_call> for most).",
                max_length=32,
            ),
        ),
        migrations.AlterField(
            model_name="catalogmodel",
            name="family",
            field=models.ForeignKey(
                blank=True,
                help_text="Leave empty to detect it from the model's chat template, else its name and config.json.",
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                to="catalog.modelfamily",
            ),
        ),
        migrations.RunPython(seed, unseed),
    ]
