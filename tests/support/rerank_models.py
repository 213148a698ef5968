"""Small random-weight rerankers saved as Hugging Face checkpoints name their weights, with
real tokenizers: BERT and XLM-RoBERTa sequence classifiers (one label, a WordPiece tokenizer
made here with each one's pair template) and a Qwen3 decoder reranker (SmolLM2's tokenizer,
whose vocabulary has "yes" and "no")."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.embedding_models import BERT_CONFIG, WORDS, build_decoder_embedder

XLMR_CONFIG = {
    **BERT_CONFIG,
    "model_type": "xlm-roberta",
    "type_vocab_size": 1,
    "pad_token_id": 1,
    "max_position_embeddings": 130,
    "layer_norm_eps": 1e-5,
}


def pair_tokenizer_json(roberta: bool) -> str:
    """A WordPiece tokenizer over WORDS with BERT's pair template ([CLS] a [SEP] b [SEP]) or
    RoBERTa's (<s> a </s></s> b </s>)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    specials = (
        ["<s>", "<pad>", "</s>", "<unk>"] if roberta else ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
    )
    letters = sorted(set("".join(WORDS)) | set("0123456789.,!?'"))
    vocab_list = [*specials, *dict.fromkeys([*WORDS, *letters, *(f"##{c}" for c in letters)])]
    vocab = {token: i for i, token in enumerate(vocab_list)}
    tokenizer = Tokenizer(models.WordPiece(vocab, unk_token=specials[3 if roberta else 1]))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    if roberta:
        tokenizer.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    else:
        tokenizer.post_processor = processors.BertProcessing(("[SEP]", 3), ("[CLS]", 2))
    tokenizer.decoder = decoders.WordPiece()
    return tokenizer.to_str()


def build_cross_encoder(destination: Path, roberta: bool = False, seed: int = 0) -> Path:
    """A random BertForSequenceClassification (or XLMRobertaForSequenceClassification) with
    one label, its weights named as transformers saves them."""
    import mlx.core as mx
    import numpy as np
    from mlx.utils import tree_flatten
    from mlx_embeddings.models import bert, xlm_roberta

    destination.mkdir(parents=True)
    tokenizer = pair_tokenizer_json(roberta)
    (destination / "tokenizer.json").write_text(tokenizer)
    base = XLMR_CONFIG if roberta else BERT_CONFIG
    config = {
        **base,
        "vocab_size": len(json.loads(tokenizer)["model"]["vocab"]),
        "architectures": [
            "XLMRobertaForSequenceClassification" if roberta else "BertForSequenceClassification"
        ],
        "id2label": {"0": "LABEL_0"},
    }
    (destination / "config.json").write_text(json.dumps(config))
    mx.random.seed(seed)
    architecture = xlm_roberta if roberta else bert
    args = {**config, "add_pooling_layer": False} if roberta else config
    encoder = architecture.Model(architecture.ModelArgs.from_dict(args))
    prefix = "roberta." if roberta else "bert."
    weights = {prefix + k: v for k, v in tree_flatten(encoder.parameters())}
    rng = np.random.default_rng(seed)
    hidden = config["hidden_size"]

    def random(*shape: int) -> mx.array:
        return mx.array(rng.normal(0, 0.5, shape).astype(np.float32))

    if roberta:
        weights |= {
            "classifier.dense.weight": random(hidden, hidden),
            "classifier.dense.bias": random(hidden),
            "classifier.out_proj.weight": random(1, hidden),
            "classifier.out_proj.bias": random(1),
        }
    else:
        weights |= {"classifier.weight": random(1, hidden), "classifier.bias": random(1)}
    mx.save_safetensors(str(destination / "model.safetensors"), weights)
    return destination


def build_decoder_reranker(tokenizer_source: Path, destination: Path, seed: int = 0) -> Path:
    """A random Qwen3 causal LM with SmolLM2's tokenizer: scored as Qwen3-Reranker is."""
    return build_decoder_embedder(tokenizer_source, destination, seed)
