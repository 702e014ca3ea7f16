"""Build a tiny random-weight Llama that `transformers serve` can load offline on CPU.

Run with the interop venv's python (see .ci/interop-env.sh):  python build_tiny_model.py OUT_DIR

The tokenizer is a small BPE trained here on text written here, with a Metaspace (SentencePiece-style)
pre-tokenizer rather than byte-level BPE: a random model then samples printable word pieces, not raw
bytes and control characters. The weights are random (seeded): the model is meant to answer nonsense.
"""

from __future__ import annotations

import sys
from pathlib import Path

CORPUS = """\
The capital of France is Paris. The capital of Germany is Berlin. The capital of Japan is Tokyo.
A river runs through the old town, past the mill and the market square, to the harbor.
The lighthouse keeper counted the ships that came into the bay before the storm.
Bread, cheese and apples were sold at the market every Saturday morning.
Access codes, archives and notes were kept in a box under the stairs.
One two three four five six seven eight nine ten eleven twelve.
Write a short paragraph about the history of the printing press.
Explain in a few sentences how a refrigerator keeps food cold.
Describe a sunrise over the sea in three sentences. Here is one sentence about the ocean.
You are one agent in a team of agents working from the same shared notes.
"""

CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def build(out: Path) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    specials = ["<unk>", "<s>", "</s>", "<pad>"]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=specials, min_frequency=1)
    tok.train_from_iterator(CORPUS.splitlines() * 4, trainer=trainer)

    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>", pad_token="<pad>",
    )
    fast.chat_template = CHAT_TEMPLATE
    config = LlamaConfig(
        vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
        bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        # Random weights can favour a special token, which decode to nothing; mute all but EOS so that the
        # model answers visible word salad (and still stops early now and then).
        for token in ("<unk>", "<s>", "<pad>"):
            model.lm_head.weight[fast.convert_tokens_to_ids(token)] = 0.0  # logit 0: below the best of 600 random ones
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    GenerationConfig(bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id,
                     pad_token_id=config.pad_token_id).save_pretrained(out)
    fast.save_pretrained(out)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: build_tiny_model.py OUT_DIR")
    build(Path(sys.argv[1]))
