"""FLOPs from a model's shape: a compute measure that does not move with the machine's load.

Eq. 7's compute is wall time, and it stays the headline; on a shared machine it moves by
15-20 % between runs. Beside it, a record's FLOPs are counted from the generator's and the
reward model's shapes and the record's token counts (`record_flops`): the prompt's prefill,
every sampled token, and every token the reward model reads (zero for the log-prob reward,
which reuses the generator's own log-probs). Plain Python, torch-free, so `analysis` can
import it.

Convention: the "2N + attention" rule of Kaplan et al. 2020 ("Scaling Laws for Neural Language
Models", §2.1, Table 1: C_forward ~ 2N + 2 n_layer n_ctx d_attn per token), with attention's two
products as PaLM counts them (Chowdhery et al. 2022, App. B: 6N + 12 L H Q T per trained token,
a third of it the forward: 2N + 4 L H Q T):
  * a multiply-add is 2 FLOPs, so a token through a [d_in, d_out] weight costs 2 d_in d_out;
  * only matrix products are counted: the q, k, v, o projections, the gated MLP (gate, up,
    down), the output head, and attention's two context products (q.k scores and the
    weighted sum of v, 2 x 2 x heads x head_dim per layer and attended position; Kaplan's
    table counts only the first). Norms, rotary embeddings, softmax, residual adds, biases,
    activations and sampling are left out: each is O(hidden) or O(heads x context) per token
    against O(hidden^2) for the projections, under 1 % for these shapes (SmolLM2-135M, the
    7-8B Llama / Mistral reward models) at the context lengths here;
  * embedding look-ups cost nothing (a gather, not a product); the output head costs
    2 hidden vocab per position it runs on, tied to the embedding or not;
  * attention is counted over the positions actually attended (causal: position i of a
    pass sees i positions), not PaLM's full T for every position.
Why this one: it is the accounting the scaling-law and model-FLOPs-utilisation literature
reports, so the numbers compare; it is exact integer arithmetic on the shape and the token
counts, so a rerun on a loaded machine gives the same count to the FLOP; and it leaves out only
terms that do not change a comparison between methods on the same models.

The model is a gated-MLP decoder (Llama, Mistral, Qwen2/3, Gemma families): per layer
q [hidden, heads*head_dim], k and v [hidden, kv_heads*head_dim], o [heads*head_dim, hidden],
gate and up [hidden, intermediate], down [intermediate, hidden]. Grouped-query attention
shrinks k and v, not the attention products (every query head attends over the context).
Not modelled: sliding-window attention (Mistral v0.1, Gemma 2/3 local layers; exact while the
context is inside the window, an over-count beyond), mixtures of experts (refused), and
padding (a batched reward model also runs its pad positions; the count here is the work the
scores need, whatever the batching).

Accounting of this engine (specrej/engine/decoding.py, specrej/methods/session.py): the
session counts the work as it happens (`decode_flops`, `reward_model_flops` per scoring call);
`record_flops` computes the same from a record alone, the independent check:
  * prefill: the prompt runs once per prompt, at batch 1, and its KV is shared by every batch
    and every row (Best-of-N's k batches too). The fast path (`params.forward` "llama") makes
    no logits there: the last prompt position's hidden state is kept and each row applies the
    head to it when it samples its first token. The Hugging Face path ("hf") calls the whole
    causal LM with logits_to_keep=1, so its prefill also runs the head once.
  * each sampled token costs one head (its logits); each sampled token a row goes on from is
    then fed through the layers at its position, writing its own k/v and attending over the
    prompt, the tokens before it and itself. A row that ends with a stop token sampled it (one
    head more than its num_tokens, which leaves the stop token out) but never feeds it; a row
    that reached max_new_tokens is not fed its last token; a halted row was fed every token.
  * the reward model scores each (prompt + response) in one forward pass per scoring call;
    an SR round scores every live row's partial response and every response completed since
    the last round; a completed response is scored once, at its final length.
  * a prompt that ran out of memory and was retried with a smaller batch (`retries` > 0)
    also spent the failed attempts' compute; the record describes only the attempt that
    succeeded, and so does this count.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields

_MISSING = object()


@dataclass(frozen=True)
class ModelShape:
    """The sizes of a gated-MLP decoder that its FLOPs depend on."""

    num_layers: int
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    tie_word_embeddings: bool = False  # no FLOPs either way: the head runs tied or not

    def __post_init__(self):
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "tie_word_embeddings":
                if not isinstance(value, bool):
                    raise ValueError(f"ModelShape.tie_word_embeddings must be a bool, got {value!r}")
            elif isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"ModelShape.{f.name} must be a positive int, got {value!r}")
        if self.num_attention_heads % self.num_kv_heads:
            raise ValueError(f"ModelShape: num_attention_heads ({self.num_attention_heads}) is not a multiple of "
                             f"num_kv_heads ({self.num_kv_heads})")

    @classmethod
    def from_config(cls, config) -> ModelShape:
        """From a Hugging Face config: a `PretrainedConfig` (attributes) or its dict (config.json).

        Reads num_hidden_layers, hidden_size, intermediate_size, num_attention_heads,
        num_key_value_heads (default: num_attention_heads, i.e. no grouped-query attention),
        head_dim (default: hidden_size // num_attention_heads; Gemma's differs), vocab_size and
        tie_word_embeddings (default True, as `PretrainedConfig`'s). A multimodal config's
        `text_config` is used when the top level has no num_hidden_layers. Mixtures of experts
        are refused: their per-token FLOPs depend on the routing, not modelled here."""
        def get(name, default=_MISSING, source=None):
            source = config if source is None else source
            value = source.get(name, None) if isinstance(source, Mapping) else getattr(source, name, None)
            if value is None:
                if default is _MISSING:
                    raise ValueError(f"model config has no {name!r}")
                return default
            return value

        if get("num_hidden_layers", None) is None and get("text_config", None) is not None:
            return cls.from_config(get("text_config"))
        for moe in ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts"):
            experts = get(moe, None)
            if isinstance(experts, int) and experts > 1:
                raise ValueError(f"model config has {moe}={experts}: mixtures of experts are not modelled")
        heads = get("num_attention_heads")
        hidden = get("hidden_size")
        return cls(num_layers=get("num_hidden_layers"), hidden_size=hidden,
                   intermediate_size=get("intermediate_size"), num_attention_heads=heads,
                   num_kv_heads=get("num_key_value_heads", heads), head_dim=get("head_dim", hidden // heads),
                   vocab_size=get("vocab_size"), tie_word_embeddings=bool(get("tie_word_embeddings", True)))

    def to_dict(self) -> dict:
        """A JSON-ready dict; `from_dict` reads it back."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping) -> ModelShape:
        names = [f.name for f in fields(cls)]
        unknown = sorted(set(data) - set(names))
        if unknown:
            raise ValueError(f"ModelShape.from_dict: unknown field(s) {unknown}")
        missing = [name for name in names if name not in data and name != "tie_word_embeddings"]
        if missing:
            raise ValueError(f"ModelShape.from_dict: missing field(s) {missing}")
        return cls(**data)


# ---------------------------------------------------------------------------------- per token
def layer_params(shape: ModelShape) -> int:
    """Matrix weights of one decoder layer: q, k, v, o and gate, up, down (no norms, biases)."""
    h = shape.hidden_size
    q_width, kv_width = shape.num_attention_heads * shape.head_dim, shape.num_kv_heads * shape.head_dim
    attention = h * q_width + 2 * h * kv_width + q_width * h
    mlp = 3 * h * shape.intermediate_size
    return attention + mlp


def non_embedding_params(shape: ModelShape) -> int:
    """The decoder layers' matrix weights (Kaplan et al.'s N without embeddings and norms)."""
    return shape.num_layers * layer_params(shape)


def layer_flops_per_token(shape: ModelShape) -> int:
    """One token through every layer's projections: 2 x non-embedding weights (no head, no attention)."""
    return 2 * non_embedding_params(shape)


def lm_head_flops(shape: ModelShape) -> int:
    """One position's next-token logits: 2 x hidden x vocab."""
    return 2 * shape.hidden_size * shape.vocab_size


def matmul_flops_per_token(shape: ModelShape) -> int:
    """One generated token's projections and its logits: 2 x (layers' weights + hidden x vocab).
    Every generation step runs the head (it makes the next token's logits)."""
    return layer_flops_per_token(shape) + lm_head_flops(shape)


def _attention_coefficient(shape: ModelShape) -> int:
    # per attended position: scores q.k and the weighted sum of v, each heads x head_dim
    # multiply-adds per layer: 2 products x 2 FLOPs
    return 4 * shape.num_layers * shape.num_attention_heads * shape.head_dim


def attention_flops(shape: ModelShape, context_len: int) -> int:
    """One new token attending to `context_len` positions (itself included: its k/v is written
    before it attends): 2 . 2 . num_layers . num_attention_heads . head_dim . context_len."""
    _check_count("context_len", context_len)
    return _attention_coefficient(shape) * context_len


def causal_attention_flops(shape: ModelShape, seq_len: int) -> int:
    """A causal forward pass over `seq_len` positions: position i (1-based) attends to i
    positions, so sum_{i=1..seq_len} i = seq_len (seq_len + 1) / 2 attended positions."""
    _check_count("seq_len", seq_len)
    return _attention_coefficient(shape) * seq_len * (seq_len + 1) // 2


# ---------------------------------------------------------------------------- per forward pass
def prefill_flops(shape: ModelShape, prompt_len: int, logits_positions: int = 1) -> int:
    """The prompt once, every position: prompt_len x the layers' projections, causal attention
    sum_{i=1..P} i, and the head on `logits_positions` positions. 1 is a generate() that makes
    the first token's logits from the last prompt position only (the Hugging Face path's
    logits_to_keep=1); this engine's fast path makes none (0: each row's first sample applies
    the head, counted with the generated tokens); a full-logits forward would be prompt_len."""
    _check_count("prompt_len", prompt_len)
    _check_count("logits_positions", logits_positions)
    return (prompt_len * layer_flops_per_token(shape) + causal_attention_flops(shape, prompt_len)
            + logits_positions * lm_head_flops(shape))


def generation_flops(shape: ModelShape, prompt_len: int, num_tokens: int) -> int:
    """One row that generated `num_tokens` tokens after a shared prompt of `prompt_len` tokens:
    token j (0-based) costs the head (its logits) and one pass through the layers, in which it
    attends to prompt_len + j + 1 positions (the prompt, the j tokens before it, and itself).
    Closed form: n . matmul_flops_per_token + 4 L H d . sum_{j=0..n-1} (P + j + 1)
    with sum = n P + n (n + 1) / 2.

    This is exactly a row that was halted (or is still live) after n tokens in this engine;
    `candidate_generation_flops` adjusts it for rows that ended (stop token, max_new_tokens)."""
    _check_count("prompt_len", prompt_len)
    _check_count("num_tokens", num_tokens)
    attended = num_tokens * prompt_len + num_tokens * (num_tokens + 1) // 2
    return num_tokens * matmul_flops_per_token(shape) + _attention_coefficient(shape) * attended


def decode_flops(shape: ModelShape, sampled: int, fed: int, attended: int) -> int:
    """Decoding work as the decode loop counts it: `sampled` tokens (one head each), `fed` tokens
    through the layers, and `attended` positions summed over the fed tokens (each attends to the
    prompt, the tokens before it and itself). Per row this is `candidate_generation_flops`."""
    for name, value in (("sampled", sampled), ("fed", fed), ("attended", attended)):
        _check_count(name, value)
    return sampled * lm_head_flops(shape) + fed * layer_flops_per_token(shape) + _attention_coefficient(shape) * attended


def candidate_generation_flops(shape: ModelShape, prompt_len: int, candidate: Mapping) -> int:
    """What this engine spent generating one candidate of a record (fields num_tokens, finished,
    complete): `generation_flops` for its num_tokens, plus one head for a stop token (sampled,
    then the row ends: num_tokens leaves it out, and it is never fed), minus the last token's
    pass through the layers for a row that reached max_new_tokens (it ends before being fed)."""
    n = _field(candidate, "num_tokens", "candidate")
    _check_count("candidates[*].num_tokens", n)
    flops = generation_flops(shape, prompt_len, n)
    if _field(candidate, "finished", "candidate"):
        return flops + lm_head_flops(shape)
    if _field(candidate, "complete", "candidate"):  # ended at max_new_tokens
        if n < 1:
            raise ValueError("a candidate complete without a stop token has num_tokens 0 (max_new_tokens >= 1)")
        return flops - layer_flops_per_token(shape) - attention_flops(shape, prompt_len + n)
    return flops


def reward_model_flops(shape: ModelShape, num_tokens: int) -> int:
    """A sequence-classification reward model reading `num_tokens` tokens (prompt + response as
    its template renders them) in one forward pass: its projections for every token, causal
    attention, and a scalar score head (hidden x 1) once per sequence instead of the lm_head.
    (Hugging Face's *ForSequenceClassification applies the score head at every position and
    reads the last one: 2 hidden (num_tokens - 1) FLOPs more, under 0.001 %.)"""
    _check_count("num_tokens", num_tokens)
    return num_tokens * layer_flops_per_token(shape) + causal_attention_flops(shape, num_tokens) + 2 * shape.hidden_size


# ------------------------------------------------------------------------------------ records
def scoring_calls(record: Mapping) -> list[int]:
    """The response length of every (prompt + response) the reward scored for this record.

    Best-of-N (no rounds): each candidate once, at its final length. SR: candidates take part in
    rounds 0, 1, ... (one rollout: all start at round 0), one `round_scores` entry each; an entry
    is a partial score of a live row, scored at that round's `decision_token`, unless it is the
    final score of a response completed since the last round (then it was scored once, at its
    final length, which is shorter than the round's decision token). A completed response is
    scored once at its final length; a halted one never. A round that ranked no rows (`ranked`
    0, a reward-free decision) scored none: the rows it halted have no entry for it. Checked against `tokens.scored`
    (their sum) when the record has it."""
    candidates = _field(record, "candidates", "record")
    rounds = record.get("rounds") or []
    decisions = [_field(r, "decision_token", "rounds[*]") for r in rounds]
    calls: list[int] = []
    for c in candidates:
        n = _field(c, "num_tokens", "candidates[*]")
        complete = _field(c, "complete", "candidates[*]")
        entries = len(_field(c, "round_scores", "candidates[*]"))
        if entries > len(decisions):
            raise ValueError(f"candidate {c.get('id')} has {entries} round_scores but the record has "
                             f"{len(decisions)} rounds")
        final_entry = complete and entries > 0 and n < decisions[entries - 1]
        live = entries - final_entry
        if not complete:
            halted = c.get("halted_round")
            # halted at a round that scored no row (`ranked` 0: a reward-free decision)
            unscored = halted is not None and halted == live and halted < len(rounds) and rounds[halted].get("ranked") == 0
            if halted is None or (halted != live - 1 and not unscored):
                raise ValueError(f"candidate {c.get('id')} is not complete, so it was halted while live; its "
                                 f"halted_round ({halted}) should be its last round ({live - 1})")
        calls += decisions[:live]
        if complete:
            calls.append(n)
    scored = (record.get("tokens") or {}).get("scored")
    if scored is not None and scored != sum(calls):
        raise ValueError(f"tokens.scored is {scored}, but the candidates and rounds give {sum(calls)} scored "
                         f"tokens: the record does not follow this engine's scoring")
    return calls


def record_flops(record: Mapping, generator: ModelShape, reward: ModelShape | None, prompt_len: int, *,
                 reward_prompt_len: int | None = None) -> dict[str, int]:
    """FLOPs of one trajectory record (specrej/records/io.py): {"prefill", "generate", "reward", "total"}.

    prefill: the prompt once (shared by every batch and row), with the head once on the Hugging
    Face path (`params.forward` "hf") and none on the fast path ("llama", the default).
    generate: `candidate_generation_flops` summed over every candidate sampled, halted ones
    included; checked against `tokens.generated` (= sum of num_tokens + one per stop token).
    reward: 0 for `reward=None` (the log-prob reward, or a Python reward with no model);
    else `reward_model_flops` of every scoring call (`scoring_calls`), each reading the prompt
    and the response. The record holds neither the reward model's prompt length nor its
    tokenization of the response: `reward_prompt_len` defaults to the generator's `prompt_len`
    and responses count as their generator tokens, an approximation (the reward model's own
    template and tokenizer differ; its `tokens_processed` counter has the exact total).
    `prompt_len`: the generator's prompt tokens (chat template applied), which the record does
    not hold either. A record without a needed field raises ValueError naming it."""
    if "error" in record and "candidates" not in record:
        raise ValueError(f"record of prompt {record.get('prompt_id')!r} failed ({record['error']}): "
                         "it has no candidates")
    _check_count("prompt_len", prompt_len)
    if prompt_len < 1:
        raise ValueError("prompt_len must be >= 1 (the engine refuses an empty prompt)")
    forward = (record.get("params") or {}).get("forward", "llama")
    if forward not in ("llama", "hf"):
        raise ValueError(f"params.forward is {forward!r}; expected 'llama' or 'hf'")
    prefill = prefill_flops(generator, prompt_len, logits_positions=1 if forward == "hf" else 0)

    candidates = _field(record, "candidates", "record")
    generate = sum(candidate_generation_flops(generator, prompt_len, c) for c in candidates)
    sampled = sum(c["num_tokens"] + bool(c["finished"]) for c in candidates)
    generated = (record.get("tokens") or {}).get("generated")
    if generated is not None and generated != sampled:
        raise ValueError(f"tokens.generated is {generated}, but the candidates sampled {sampled} tokens "
                         f"(num_tokens + 1 per stop token): the record does not follow this engine's decoding")

    calls = scoring_calls(record)  # checks the record even when the reward has no model
    if reward is None:
        reward_flops = 0
    else:
        rm_prompt = prompt_len if reward_prompt_len is None else reward_prompt_len
        _check_count("reward_prompt_len", rm_prompt)
        reward_flops = sum(reward_model_flops(reward, rm_prompt + n) for n in calls)
    return {"prefill": prefill, "generate": generate, "reward": reward_flops,
            "total": prefill + generate + reward_flops}


def _field(mapping: Mapping, name: str, where: str):
    if not isinstance(mapping, Mapping) or name not in mapping:
        raise ValueError(f"{where} has no field {name!r}")
    return mapping[name]


def _check_count(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a non-negative int, got {value!r}")
