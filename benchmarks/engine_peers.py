"""The other engines `engine_benchmark.py` times beside specrej's (its --peers): Hugging Face
`generate` on the same model object (`time_hf`), CTranslate2 (`CTranslate2Peer`) and llama.cpp
(`LlamaCppPeer`) on the same weights, converted from the HF model directory behind --model
(`model_dir_of`). Each times prefill + exactly `new_tokens` sampled tokens for each of `rows` rows;
engine_benchmark.py's docstring says how each is set up and what its rows compare.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import torch

from specrej.engine.engine import Engine
from specrej.engine.sampling import SamplingParams
from specrej.models.loading import resolve_model_path

CT2_COMPUTE_TYPES = ("float32", "int8", "int8_float32")
LLAMACPP_TYPES = ("bf16", "f32")  # convert_hf_to_gguf.py --outtype: the engine's bfloat16 and float32


def peer_timers(peers: list[str], model: str, engine: Engine, converter: str | None,
                workdir: Path) -> tuple[dict, dict]:
    """The timers of `peers` (--peers) other than hf, by the name of their rows, in that order, and
    the seconds each took to convert the model; every conversion is written under `workdir`."""
    timers, converted = {}, {}
    for peer in peers:
        if peer == "hf":
            continue
        if peer.removeprefix("llamacpp-") in LLAMACPP_TYPES:
            llamacpp = LlamaCppPeer(model_dir_of(model, engine, workdir), peer.removeprefix("llamacpp-"),
                                    converter, workdir)
            timers[peer] = llamacpp.time
            converted[peer] = llamacpp.convert_s
            continue
        compute_type = peer.removeprefix("ct2-")
        if not peer.startswith("ct2-") or compute_type not in CT2_COMPUTE_TYPES:
            raise SystemExit(f"--peers: unknown peer {peer!r} (hf, "
                             + ", ".join(f"ct2-{c}" for c in CT2_COMPUTE_TYPES) + ", "
                             + ", ".join(f"llamacpp-{t}" for t in LLAMACPP_TYPES) + ")")
        ct2 = CTranslate2Peer(engine, model_dir_of(model, engine, workdir), compute_type, workdir)
        timers[f"ct2 {compute_type}"] = ct2.time
        converted[f"ct2 {compute_type}"] = ct2.convert_s
    return timers, converted


def time_hf(model, prompt_ids, rows: int, new_tokens: int, sampling: SamplingParams) -> float:
    """Seconds for Hugging Face `generate` (prefill + exactly `new_tokens` tokens for each of `rows`
    rows: min_new_tokens) on the engine's model object."""
    ids = torch.tensor([prompt_ids] * rows)
    options = dict(do_sample=sampling.temperature > 0, temperature=sampling.temperature, top_p=sampling.top_p,
                   top_k=sampling.top_k, max_new_tokens=new_tokens, min_new_tokens=new_tokens)
    tic = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), **options)
    elapsed = time.perf_counter() - tic
    assert out.shape[1] == len(prompt_ids) + new_tokens
    return elapsed


class CTranslate2Peer:
    """CTranslate2's `Generator` on the engine's model, converted once into a temporary directory."""

    def __init__(self, engine: Engine, model_dir: str, compute_type: str, workdir: Path):
        try:
            import ctranslate2
        except ImportError:
            raise SystemExit('--peers: CTranslate2 is not installed (pip install -e ".[bench]")') from None
        supported = ctranslate2.get_supported_compute_types("cpu")
        if compute_type not in supported:
            raise SystemExit(f"--peers: CTranslate2 on this CPU supports {sorted(supported)}, not {compute_type!r}")
        output = workdir / f"ct2-{compute_type}"
        tic = time.perf_counter()
        ctranslate2.converters.TransformersConverter(model_dir, load_as_float16=False).convert(
            str(output), quantization=compute_type)
        self.convert_s = time.perf_counter() - tic
        self.generator = ctranslate2.Generator(str(output), device="cpu", compute_type=compute_type,
                                               intra_threads=torch.get_num_threads())
        self.tokenizer = engine.tokenizer

    def time(self, prompt_ids, rows: int, new_tokens: int, sampling: SamplingParams) -> float:
        """Seconds for prefill + exactly `new_tokens` sampled tokens for each of `rows` rows."""
        tokens = self.tokenizer.convert_ids_to_tokens(prompt_ids)
        tic = time.perf_counter()
        results = self.generator.generate_batch(
            [tokens] * rows, max_length=new_tokens, min_length=new_tokens, include_prompt_in_result=False,
            sampling_temperature=sampling.temperature, sampling_topk=sampling.top_k, sampling_topp=sampling.top_p)
        elapsed = time.perf_counter() - tic
        lengths = {len(result.sequences_ids[0]) for result in results}
        assert lengths == {new_tokens}, f"CTranslate2 generated {lengths} tokens per row, not {new_tokens}"
        return elapsed


class LlamaCppPeer:
    """llama.cpp on the engine's model, converted once to a GGUF of `outtype` by its own converter.

    A timed call builds a context with one sequence (and KV stream) per row, prefills the prompt once
    as sequence 0 and copies its KV to the others (`llama_memory_seq_cp`), then per step samples every row from
    its logits with a sampler chain (top-k, top-p, temperature, a seeded draw) and decodes one batch
    of the rows' tokens, as the engine does."""

    def __init__(self, model_dir: str, outtype: str, converter: str | None, workdir: Path):
        try:
            import llama_cpp
        except ImportError:
            raise SystemExit("--peers: llama-cpp-python is not installed (pip install llama-cpp-python "
                             "builds llama.cpp from its sdist)") from None
        if converter is None or not Path(converter).is_file():
            raise SystemExit("--peers llamacpp-*: --llamacpp-converter must name llama.cpp's convert_hf_to_gguf.py "
                             f"(in llama-cpp-python's sdist, vendor/llama.cpp/), got {converter!r}")
        self.llama_cpp = llama_cpp
        # llama.cpp logs every context it builds to stderr; the benchmark prints its own lines only
        self._quiet = llama_cpp.llama_log_callback(lambda level, text, data: None)
        llama_cpp.llama_log_set(self._quiet, None)
        gguf = workdir / f"llamacpp-{outtype}.gguf"
        source = Path(converter).parent
        tic = time.perf_counter()
        subprocess.run([sys.executable, converter, model_dir, "--outtype", outtype, "--outfile", str(gguf)],
                       check=True, capture_output=True, env={**os.environ, "PYTHONPATH": f"{source}:{source / 'gguf-py'}"})
        self.convert_s = time.perf_counter() - tic
        llama_cpp.llama_backend_init()
        self.model = llama_cpp.llama_model_load_from_file(str(gguf).encode(), llama_cpp.llama_model_default_params())
        if not self.model:
            raise SystemExit(f"--peers: llama.cpp could not load {gguf}")

    def time(self, prompt_ids, rows: int, new_tokens: int, sampling: SamplingParams) -> float:
        """Seconds for prefill + exactly `new_tokens` sampled tokens for each of `rows` rows."""
        L = self.llama_cpp
        params = L.llama_context_default_params()
        # a KV stream per sequence, the prompt copied into each, as llama.cpp's server runs parallel
        # sequences; one unified buffer (the prompt's cells shared) measured 0.4x as fast at 64 rows:
        # each row attends over every cell
        params.n_ctx = rows * (len(prompt_ids) + new_tokens + 256)
        params.n_batch = params.n_ubatch = max(len(prompt_ids), rows)
        params.n_seq_max, params.kv_unified = rows, False
        params.n_threads = params.n_threads_batch = torch.get_num_threads()
        context = L.llama_init_from_model(self.model, params)
        chain = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
        if sampling.top_k:
            L.llama_sampler_chain_add(chain, L.llama_sampler_init_top_k(sampling.top_k))
        if sampling.top_p < 1:
            L.llama_sampler_chain_add(chain, L.llama_sampler_init_top_p(sampling.top_p, 1))
        L.llama_sampler_chain_add(chain, L.llama_sampler_init_temp(sampling.temperature))
        L.llama_sampler_chain_add(chain, L.llama_sampler_init_dist(0))
        batch = L.llama_batch_init(params.n_batch, 0, 1)
        sampled = 0
        try:
            tic = time.perf_counter()
            self._fill(batch, [(token, pos, 0, pos == len(prompt_ids) - 1) for pos, token in enumerate(prompt_ids)])
            assert L.llama_decode(context, batch) == 0
            memory = L.llama_get_memory(context)
            for row in range(1, rows):
                L.llama_memory_seq_cp(memory, 0, row, -1, -1)
            logits_at = [len(prompt_ids) - 1] * rows  # the batch index each row samples from
            for step in range(new_tokens):
                tokens = [L.llama_sampler_sample(chain, context, index) for index in logits_at]
                sampled += len(tokens)
                if step == new_tokens - 1:
                    break
                self._fill(batch, [(token, len(prompt_ids) + step, row, True) for row, token in enumerate(tokens)])
                assert L.llama_decode(context, batch) == 0
                logits_at = list(range(rows))
            elapsed = time.perf_counter() - tic
        finally:
            L.llama_batch_free(batch)
            L.llama_sampler_free(chain)
            L.llama_free(context)
        assert sampled == rows * new_tokens
        return elapsed

    @staticmethod
    def _fill(batch, entries) -> None:
        """(token, position, sequence, logits wanted) per entry."""
        for i, (token, pos, seq, logits) in enumerate(entries):
            batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = token, pos, 1, logits
            batch.seq_id[i][0] = seq
        batch.n_tokens = len(entries)


def model_dir_of(args_model: str, engine: Engine, workdir: Path) -> str:
    """The HF model directory behind --model: the loader's own (a GGUF's de-quantised conversion in the
    model cache), or, for `shape:` models built in memory, the model saved to `workdir`."""
    if not args_model.startswith("shape:"):
        return resolve_model_path(args_model)
    path = workdir / "hf-model"
    engine.model.save_pretrained(path)
    engine.tokenizer.save_pretrained(path)
    return str(path)
