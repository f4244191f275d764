"""Tiny random models built in code and saved to disk, so the real loading code runs offline."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

TESTS = Path(__file__).parent
sys.path.insert(0, str(TESTS))  # for `python:toy_rewards:...` reward specs

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Speculative rejection halts the lowest scoring responses early.",
    "Best of N samples many responses and returns the best one.",
    "Write a poem about the sea. Explain gravity to a child. List three fruits.",
    "Reward models score a prompt and a response; language models generate text.",
] * 20
GENERATOR_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}</s>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
REWARD_TEMPLATE = "{% for m in messages %}[{{ m['role'] | upper }}] {{ m['content'] }}\n{% endfor %}[SCORE]"


@pytest.fixture(autouse=True)
def float32_auto_dtype_on_cpu(monkeypatch):
    """`--dtype auto` picks bfloat16 on CPUs with native bf16 matmul; in tests it means float32
    on every CPU, so exact comparisons do not depend on the machine (tests/test_models_dtype.py
    tests the rule itself, with the probe set both ways)."""
    monkeypatch.setattr("specrej.models.loading.cpu_has_native_bfloat16", lambda: False)


def build_tokenizer(chat_template: str | None):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<unk>", "<s>", "</s>", "<|user|>", "<|assistant|>"]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(
        vocab_size=400, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    fast.chat_template = chat_template
    return fast


def tiny_llama_config(vocab_size: int, **overrides):
    from transformers import LlamaConfig

    config = dict(vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                  bos_token_id=1, eos_token_id=2, pad_token_id=2, tie_word_embeddings=False)
    return LlamaConfig(**{**config, **overrides})


@pytest.fixture(scope="session")
def generator_dir(tmp_path_factory) -> Path:
    from transformers import LlamaForCausalLM

    path = tmp_path_factory.mktemp("tiny-generator")
    tokenizer = build_tokenizer(GENERATOR_TEMPLATE)
    torch.manual_seed(0)
    model = LlamaForCausalLM(tiny_llama_config(len(tokenizer)))
    with torch.no_grad():  # sharper next-token distributions than a fresh init, so texts vary less wildly
        model.lm_head.weight.mul_(8)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def reward_model_dir(tmp_path_factory) -> Path:
    from transformers import LlamaForSequenceClassification

    path = tmp_path_factory.mktemp("tiny-reward-model")
    tokenizer = build_tokenizer(REWARD_TEMPLATE)
    torch.manual_seed(1)
    model = LlamaForSequenceClassification(tiny_llama_config(len(tokenizer), num_labels=1))
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def engine(generator_dir):
    from specrej import load_engine

    return load_engine(str(generator_dir), dtype="float32")  # module-wide: built before the autouse probe patch


@pytest.fixture
def prompts_file(tmp_path) -> Path:
    path = tmp_path / "prompts.json"
    path.write_text(json.dumps([{"prompt": "Write a poem about the sea."},
                                {"prompt": "Explain gravity to a child."},
                                {"prompt": "List three fruits."}]))
    return path


@pytest.fixture(scope="session")
def custom_code_reward_dir(tmp_path_factory, reward_model_dir) -> Path:
    """A reward model whose code ships in its directory (auto_map), like ArmoRM."""
    import shutil

    from custom_rm_code import CustomRM, CustomRMConfig
    from transformers import AutoTokenizer

    path = tmp_path_factory.mktemp("custom-code-rm")
    tokenizer = AutoTokenizer.from_pretrained(reward_model_dir)
    config = CustomRMConfig(**tiny_llama_config(len(tokenizer)).to_dict())
    config.auto_map = {"AutoConfig": "custom_rm_code.CustomRMConfig",
                       "AutoModelForSequenceClassification": "custom_rm_code.CustomRM"}
    torch.manual_seed(2)
    CustomRM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    shutil.copy(TESTS / "custom_rm_code.py", path / "custom_rm_code.py")
    return path


# -- tiny random models of other architectures (tests/test_hf_forward.py) --------------------------
# Each is built from a small config, saved to a tmp dir with the generator's tokenizer and loaded
# by the real loading code (load_engine). The engine's own forward pass runs llama / mistral /
# qwen2 / qwen3 / gemma3_text; every other one goes through the fallback (specrej/engine/hf_forward.py).

def _tiny_configs():
    import transformers as tf

    common = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=256, bos_token_id=1, eos_token_id=2,
                  pad_token_id=0, tie_word_embeddings=False)
    return {
        "mistral": lambda v: tf.MistralConfig(vocab_size=v, sliding_window=256, **common),
        "qwen2": lambda v: tf.Qwen2Config(vocab_size=v, **common),
        "qwen3": lambda v: tf.Qwen3Config(vocab_size=v, head_dim=16, **common),
        # sliding window 8 < prompt + continuation: the sliding layer really slides; soft-capped logits
        "gemma2": lambda v: tf.Gemma2Config(vocab_size=v, head_dim=16, sliding_window=8, query_pre_attn_scalar=16,
                                            final_logit_softcapping=30.0, attn_logit_softcapping=50.0, **common),
        "gemma3_text": lambda v: tf.Gemma3TextConfig(vocab_size=v, head_dim=16, sliding_window=8,
                                                     query_pre_attn_scalar=16,
                                                     layer_types=["sliding_attention", "full_attention"], **common),
        "phi3": lambda v: tf.Phi3Config(vocab_size=v, **common),
        "olmo2": lambda v: tf.Olmo2Config(vocab_size=v, **common),
        "gpt_neox": lambda v: tf.GPTNeoXConfig(vocab_size=v, rotary_pct=0.5, **{
            k: x for k, x in common.items() if k != "num_key_value_heads"}),
        "gpt2": lambda v: tf.GPT2Config(vocab_size=v, n_embd=64, n_layer=2, n_head=4, n_positions=256,
                                        bos_token_id=1, eos_token_id=2),
        # hybrid: a Mamba layer (linear-attention state in the cache) and an attention layer, MoE MLP
        "jamba": lambda v: tf.JambaConfig(vocab_size=v, attn_layer_period=2, attn_layer_offset=1, expert_layer_period=2,
                                          expert_layer_offset=1, num_experts=2, mamba_d_state=8, mamba_expand=2,
                                          use_mamba_kernels=False, **{k: x for k, x in common.items()
                                                                      if k != "max_position_embeddings"}),
        # no attention at all: the cache holds only per-row state that does not grow with tokens
        "mamba": lambda v: tf.MambaConfig(vocab_size=v, hidden_size=64, num_hidden_layers=2, state_size=8,
                                          bos_token_id=1, eos_token_id=2, pad_token_id=0),
    }


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """tiny_model_dir(model_type) -> a saved tiny random causal LM of that architecture (built once)."""
    from transformers import AutoModelForCausalLM

    configs, built = _tiny_configs(), {}

    def build(model_type: str) -> Path:
        if model_type not in built:
            path = tmp_path_factory.mktemp(f"tiny-{model_type}")
            tokenizer = build_tokenizer(GENERATOR_TEMPLATE)
            torch.manual_seed(0)
            model = AutoModelForCausalLM.from_config(configs[model_type](len(tokenizer)))
            with torch.no_grad():  # sharper next-token distributions, as the Llama generator's
                model.get_output_embeddings().weight.mul_(4)
            model.save_pretrained(path)
            tokenizer.save_pretrained(path)
            built[model_type] = path
        return built[model_type]

    return build


@pytest.fixture
def one_prompt(tmp_path) -> Path:
    """A prompts file of one prompt."""
    path = tmp_path / "one.txt"
    path.write_text("Write a poem about the sea.\n")
    return path
