"""Small random-weight embedding models built from each library's own config classes, with
real tokenizers: a Qwen3 decoder (SmolLM2's tokenizer) and a BERT encoder (a WordPiece
tokenizer made here with the `tokenizers` library)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

QWEN3_CONFIG = {
    "model_type": "qwen3",
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "rms_norm_eps": 1e-6,
    "max_position_embeddings": 512,
    "rope_theta": 10000.0,
    "tie_word_embeddings": True,
}

BERT_CONFIG = {
    "model_type": "bert",
    "hidden_size": 48,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 96,
    "max_position_embeddings": 128,
    "type_vocab_size": 2,
    "layer_norm_eps": 1e-12,
}

_VOCABULARY = (
    "the a an of and to in is it that was for on are with as his they be at one have this "
    "from or had by word but what some we can out other were all there when up use your "
    "how said each she which do their time if will way about many then them write would "
    "like so these her long make thing see him two has look more day could go come did "
    "number sound no most people my over know water than call first who may down side been "
    "now find any new work part take get place made live where after back little only "
    "round man year came show every good me give our under name very through just form "
    "sentence great think say help low line differ turn cause much mean before move right "
    "boy old too same tell does cat dog sat mat hello world quick brown fox jumps lazy "
    "embedding vector model search "
)
WORDS = tuple(_VOCABULARY.split())


def _save(model, config: dict, destination: Path) -> None:
    import mlx.core as mx
    from mlx.utils import tree_flatten

    (destination / "config.json").write_text(json.dumps(config))
    mx.eval(model.parameters())
    weights = dict(tree_flatten(model.parameters()))
    mx.save_safetensors(str(destination / "model.safetensors"), weights)


def build_decoder_embedder(tokenizer_source: Path, destination: Path, seed: int = 0) -> Path:
    """A random Qwen3 (mlx-lm's classes) with SmolLM2's tokenizer: last-token pooling."""
    import mlx.core as mx
    from mlx_lm.models.qwen3 import Model, ModelArgs

    destination.mkdir(parents=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tokenizer_source / name, destination / name)
    vocab = json.loads((tokenizer_source / "tokenizer.json").read_text())["model"]["vocab"]
    config = {**QWEN3_CONFIG, "vocab_size": len(vocab)}
    mx.random.seed(seed)
    _save(Model(ModelArgs.from_dict(config)), config, destination)
    return destination


def bert_tokenizer_json() -> str:
    """A BERT WordPiece tokenizer over WORDS, [CLS] ... [SEP] around every input."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    letters = sorted(set("".join(WORDS)) | set("0123456789.,!?'"))
    vocab_list = [*specials, *dict.fromkeys([*WORDS, *letters, *(f"##{c}" for c in letters)])]
    vocab = {token: i for i, token in enumerate(vocab_list)}
    tokenizer = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.post_processor = processors.BertProcessing(
        ("[SEP]", vocab["[SEP]"]), ("[CLS]", vocab["[CLS]"])
    )
    tokenizer.decoder = decoders.WordPiece()
    return tokenizer.to_str()


def build_encoder_embedder(destination: Path, seed: int = 0, pooling: str = "mean") -> Path:
    """A random BERT (mlx-embeddings' classes), sentence-transformers pooling folder."""
    import mlx.core as mx
    from mlx_embeddings.models.bert import Model, ModelArgs

    destination.mkdir(parents=True)
    tokenizer = bert_tokenizer_json()
    (destination / "tokenizer.json").write_text(tokenizer)
    config = {**BERT_CONFIG, "vocab_size": len(json.loads(tokenizer)["model"]["vocab"])}
    (destination / "1_Pooling").mkdir()
    flags = {
        "pooling_mode_mean_tokens": pooling == "mean",
        "pooling_mode_cls_token": pooling == "cls",
    }
    (destination / "1_Pooling" / "config.json").write_text(json.dumps(flags))
    mx.random.seed(seed)
    _save(Model(ModelArgs.from_dict(config)), config, destination)
    return destination
