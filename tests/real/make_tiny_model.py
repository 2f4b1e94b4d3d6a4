"""Make a tiny random-weight Llama that vLLM can serve on CPU, with nothing downloaded.

Run with the vLLM environment's Python (it needs torch, transformers and tokenizers):

    python make_tiny_model.py OUT_DIR

The text it generates is noise; what matters is that vLLM's scheduler, KV cache,
queue and /metrics are the real thing. Head size 32 (128 / 4 heads): vLLM's CPU
attention refuses 16.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<s>{{ message['role'] }}: {{ message['content'] }}</s>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<s>assistant: {% endif %}"
)
SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<pad>"]


def training_text(lines: int = 3000) -> list[str]:
    """Deterministic English-like text for the tokenizer to learn from."""
    words = (
        "the quick brown fox jumps over a lazy dog while capacity planners watch queue depth "
        "tokens per second rise and fall as requests arrive in bursts from many users who "
        "ask about weather code poems numbers 0 1 2 3 4 5 6 7 8 9 and other things"
    ).split()
    out = []
    for i in range(lines):
        out.append(" ".join(words[(i * 7 + j * 3) % len(words)] for j in range(12 + i % 9)))
    return out


def make_tokenizer(out_dir: str):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1000,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(training_text(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out_dir)
    return fast


def make_model(out_dir: str, vocab_size: int, bos: int, eos: int, pad: int) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=2,
        intermediate_size=256,
        max_position_embeddings=2048,
        bos_token_id=bos,
        eos_token_id=eos,
        pad_token_id=pad,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(config).to(torch.float32)
    model.save_pretrained(out_dir, safe_serialization=True)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: make_tiny_model.py OUT_DIR", file=sys.stderr)
        return 2
    out_dir = argv[1]
    os.makedirs(out_dir, exist_ok=True)
    tokenizer = make_tokenizer(out_dir)
    ids = tokenizer.convert_tokens_to_ids(SPECIAL_TOKENS)
    make_model(out_dir, len(tokenizer), bos=ids[1], eos=ids[2], pad=ids[3])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
