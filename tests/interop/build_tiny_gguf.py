"""Write a tiny random-weight Llama as GGUF for the real llama-server interop test (run by .ci/llama-server.sh
with the `gguf` package, in a venv of its own: rigctl does not depend on it).

The model is random: its answers are noise, so `smoke` fails, which is the point of a real engine test that
cannot load a real model. Its tokenizer is a small SentencePiece ("llama") vocabulary: the control tokens,
the 256 byte tokens <0x00>..<0xFF> (without them llama.cpp throws on any character outside the vocabulary),
single letters and every prefix of the words verify's prompts use, so that prompts tokenize to a few
characters a token, as a real tokenizer's would.

    usage: python build_tiny_gguf.py OUT.gguf
"""

from __future__ import annotations

import string
import sys
from pathlib import Path

import gguf  # type: ignore[import-not-found]  # only in the venv .ci/llama-server.sh builds
import numpy as np

N_CTX_TRAIN = 8192  # llama-server caps a slot's context at the model's training context: keep it above -c
N_EMBD, N_HEAD, N_LAYER, N_FF = 64, 4, 2, 128
WORDS = """the a an of and to in is it that for on with as at by from this be are was were or not his her they
we you he she one two three capital france paris germany berlin japan tokyo access code archive answer question
notes read everything asked every hidden these each line written below long collection ferryman surveyor night
clerk old beekeeper cartographer young pilot harbor master botanist lighthouse keeper locksmith archivist
glassblower miller tailor river guide violin maker stationmaster weaver repaired counted painted measured carried
described sorted polished mapped photographed catalogued sketched weighed mended inspected labelled copper
kettles crate pears broken compass wooden chairs tide tables bundle letters brass telescope atlas rivers winter
coats jar honey garden gate rusty lanterns stone steps box seeds signal flags near mill behind granary northern
pier chapel loft beside canal under railway bridge hill road edge orchard inside boathouse next quarry along salt
marsh market square before dawn rainy tuesday late autumn just after noon during fair turn quiet evening early
spring while bells rang supper then slowly again still later quietly there agent team working same shared task
name fruit yellow planet larger earth african animal lives sea colour rainbow metal used wires season year
musical instrument strings country south america tool cut wood bird cannot fly vegetable grows underground reply
short sentence write paragraph about history printing press explain few sentences how refrigerator keeps food
cold describe sunrise over three ocean here oslo lima cairo quito dakar hanoi perth tunis sofia riga bern accra
minsk doha baku male suva apia nuuk kabul amber basalt cinder dahlia ember fjord garnet heron indigo jasper kelp
lichen magpie nectar onyx pumice quartz raven sorrel tansy""".split()  # noqa: SIM905 - prose reads better


def vocabulary() -> tuple[list[str], list[float], list[int]]:
    tokens = ["<unk>", "<s>", "</s>"]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [gguf.TokenType.BYTE] * 256
    pieces: list[str] = []
    singles = string.ascii_letters + string.digits + string.punctuation
    for ch in singles:
        pieces += [ch, "\u2581" + ch]
    pieces.append("\u2581")
    for word in WORDS:
        for form in (word, word.capitalize()):
            marked = "\u2581" + form
            pieces += [marked[:i] for i in range(2, len(marked) + 1)]
            pieces += [form[:i] for i in range(2, len(form) + 1)]
    seen = set(tokens)
    for piece in pieces:
        if piece not in seen:
            seen.add(piece)
            tokens.append(piece)
            types.append(gguf.TokenType.NORMAL)
    # SentencePiece merges the pair whose result scores highest: longer pieces first.
    scores = [0.0] * 259 + [float(len(t)) for t in tokens[259:]]
    return tokens, scores, [int(t) for t in types]


def main(out: Path) -> None:
    rng = np.random.default_rng(1729)
    tokens, scores, types = vocabulary()
    n_vocab = len(tokens)
    writer = gguf.GGUFWriter(str(out), "llama")
    writer.add_name("rigctl-tiny-random-llama")
    writer.add_context_length(N_CTX_TRAIN)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(N_LAYER)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD)
    writer.add_rope_dimension_count(N_EMBD // N_HEAD)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_chat_template(
        "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant:{% endif %}")

    def weight(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    ones = np.ones(N_EMBD, dtype=np.float32)
    # numpy shapes are (rows, columns); GGUF stores them reversed, as llama.cpp's ne[] wants them.
    writer.add_tensor("token_embd.weight", weight(n_vocab, N_EMBD))
    writer.add_tensor("output_norm.weight", ones)
    writer.add_tensor("output.weight", weight(n_vocab, N_EMBD))
    for i in range(N_LAYER):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", ones)
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            writer.add_tensor(f"blk.{i}.{name}.weight", weight(N_EMBD, N_EMBD))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", ones)
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", weight(N_FF, N_EMBD))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", weight(N_FF, N_EMBD))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", weight(N_EMBD, N_FF))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(f"build_tiny_gguf: {out} ({out.stat().st_size:,} bytes, {n_vocab} tokens)")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: build_tiny_gguf.py OUT.gguf")
    main(Path(sys.argv[1]))
