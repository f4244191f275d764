"""The decode step as one compiled graph over static shapes (`--compile on`), gpt-fast style: the
engine wraps its forward pass (`CompiledForward`) and the step is that forward pass's own decode
step (`llama.LlamaForward.decode_step`, which the eager step runs), traced by torch.compile with
the weights as the graph's inputs (`StaticDecodeStep`). The model knows nothing of it.

Its shapes are static within a phase of a rollout:
- the rows' own KV is the cache's preallocated buffer, full length, written at the position
  `pos`, which is data (a 0-d tensor, gpt-fast's `input_pos`), with a mask over the slots not yet
  filled (`cache.KVCache` zeroes them, so a masked slot holds finite numbers) and, for a layer with
  a sliding window, over the positions before its window (`first_visible`, data too);
- the rows are a dynamic dimension too, in three ranges (`row_range`), one graph each: a single
  row (a size torch specialises), 2 to PACKED_MAX_ROWS rows (the packed GEMMs) and more;
- the prompt's length, the cache's length and the span of the rows' own KV that attention reads
  (the filled slots rounded up to SPAN_BLOCK) are dynamic dimensions (`torch._dynamo.mark_dynamic`):
  one graph serves every prompt, every re-layout of the cache and every step. The cache keeps a
  spare slot per row (`KVCache(spare_slots=1)`), so that span is never the whole buffer, whose
  layout would then be a guard of the graph.
torch's settings for tracing (`tracing_settings`) hold only while a graph is traced.

Each graph is compiled ahead of time once per machine (`torch.compile(...).aot_compile`, only its
shape guards kept) and saved under `graph_cache.artifact_dir`; a later process loads it. The
seconds spent loading or compiling graphs are counted (`graph_wall_s`, `graph_cpu_s`) and a run's
record keeps them apart from its compute (`timing.graphs_s`). On a CPU in bfloat16 the GEMMs run
on oneDNN's packed weights (`linear.pack`) through `packed_linear_op`, an opaque op, which is what
inductor's freezing would do; attention is a C++ kernel where it applies
(`attention.attend_kernel`), else inductor's code (`attention.attend_static`).

Plain sampling with the lm_head is a graph of its own (`StaticSampler`, `CompiledForward.draw`; one
for temperature 1, one for any other), on the same row ranges; prefill, top-k / top-p sampling and
a step that collects every layer's states stay eager. Not on CUDA graphs: the cache's
buffers are inputs the graph writes, which CUDA graph trees do not capture, and no GPU has
measured another capture here.

Outputs differ from eager, so a compiled run's record says so (`params.compiled`): in float32 in
the last bits (fused ops round differently); in bfloat16 a fused graph keeps in float32 what the
eager ops round to bfloat16 after every op, a different sample of the same distribution
(docs/results.md, "The decode step as one graph").
"""

from __future__ import annotations

import contextlib
import time
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F

from ..models.cache import cache_dir, entry_lock
from .attention import attend_kernel, attention_for
from .graph_cache import artifact_dir, inductor_cache, inductor_cache_dir, make_private_dir, refuse_untrusted
from .linear import PACKED_MAX_ROWS, PackedWeight
from .sampler import draw, draw_plain


@torch.library.custom_op("specrej::packed_linear", mutates_args=())
def packed_linear_op(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """oneDNN's linear on a weight packed by `linear.pack`, opaque to inductor (whose lowering
    does not take a packed weight as a graph input)."""
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


@packed_linear_op.register_fake
def _packed_linear_shape(x, packed, bias):
    return x.new_empty((*x.shape[:-1], packed.shape[0]))


def graph_linear(x: torch.Tensor, weight, bias: torch.Tensor | None) -> torch.Tensor:
    """The GEMM inside the graph: a packed weight (`linear.PackedWeight`) up to PACKED_MAX_ROWS rows,
    else F.linear (chosen when the graph is traced: the graph of a row range takes one of the two)."""
    if isinstance(weight, PackedWeight):
        if x.numel() <= PACKED_MAX_ROWS * x.shape[-1]:
            return packed_linear_op(x, weight.packed, bias)
        weight = weight.weight
    return F.linear(x, weight, bias)


def as_parameters(module: torch.nn.Module, value):
    """`value` (a layer's weights: tensors, `PackedWeight`s, None, floats) with every tensor
    registered as a parameter of `module` (in `module.params`), so that its graph takes it as an input."""
    if isinstance(value, torch.Tensor):
        module.params.append(torch.nn.Parameter(value.detach(), requires_grad=False))
        return module.params[-1]
    if isinstance(value, tuple):
        return type(value)(*(as_parameters(module, v) for v in value))
    return value


class StaticDecodeStep(torch.nn.Module):
    """`forward`'s decode step (`llama.LlamaForward.decode_step`, `forward` a `LlamaForward` or a
    subclass) for one token per row over static shapes (the module docstring), with the weights as
    the graph's inputs, the graph's GEMM and the compiled step's attention (`attention.attention_for`)."""

    def __init__(self, forward):
        super().__init__()
        self.forward_pass = forward
        self.embed = forward.eager_run.embed  # a submodule: its weight is an input of the graph, like the layers'
        self.params = torch.nn.ParameterList()
        self.run = forward.eager_run._replace(weights=[as_parameters(self, w) for w in forward.eager_run.weights],
                                              linear=graph_linear)
        self.attention = attention_for(forward.device, forward.dtype, forward.head_dim, compiled=True)

    def forward(self, tokens, pos, rotary, first_visible, own_positions, prompt_k, prompt_v, k, v) -> torch.Tensor:
        """tokens [rows] at generated position `pos` (0-d); rotary: per layer (cos, sin) at that
        position; first_visible [layers]: each layer's oldest visible position; own_positions
        [span]: 0..span-1, the slots of the rows' own KV that attention reads (the filled ones and a
        few more: `span` is a dynamic dimension, so the unfilled tail of a long cache costs nothing),
        or None with the attention kernel, which reads the slots up to `pos` itself.
        Writes each layer's new k/v into k/v [rows, kv_heads, L, d] at `pos`; returns the final
        hidden states [rows, hidden]."""
        span = None if own_positions is None else own_positions.shape[0]
        return self.forward_pass.decode_step(self.run, self.attention, tokens, pos, rotary, first_visible, span,
                                             prompt_k, prompt_v, k, v)


class StaticSampler(torch.nn.Module):
    """The lm_head and plain sampling (no top-k or top-p cut) as one graph: the sampler's own
    `sampler.draw_plain` on the logits [rows, vocab], which the graph makes and reads in a few fused
    passes instead of one eager op each. The uniform draw `u` [rows, 1] comes from outside (the
    generator's own `torch.rand`, the call the eager sampler makes), so the same draw picks the same
    token up to the rounding of the fused ops.

    `tempered`: a graph for every temperature (a 0-d tensor); else one for temperature 1 (the
    default everywhere), whose draw and log-probs share one exponential of the logits."""

    def __init__(self, forward, tempered: bool):
        super().__init__()
        _, weight, bias = forward.lm_head
        self.params = torch.nn.ParameterList()
        self.weight, self.bias = as_parameters(self, weight), as_parameters(self, bias)
        self.softcap = getattr(forward, "final_logit_softcapping", None)
        self.tempered = tempered

    def forward(self, hidden: torch.Tensor, u: torch.Tensor, temperature: torch.Tensor):
        logits = graph_linear(hidden, self.weight, self.bias)
        if self.softcap is not None:
            logits = torch.tanh(logits / self.softcap) * self.softcap
        return draw_plain(logits.float(), u, temperature if self.tempered else 1.0)


def row_range(rows: int) -> str:
    """Which graph a step of `rows` rows runs on: the rows are a dynamic dimension, one graph for 2
    to PACKED_MAX_ROWS rows (the packed GEMMs) and one above (the weights as they are), and one
    for a single row, a size torch specialises."""
    return "1" if rows == 1 else f"2-{PACKED_MAX_ROWS}" if rows <= PACKED_MAX_ROWS else f"{PACKED_MAX_ROWS + 1}-"


ALL_RANGES = ("1", f"2-{PACKED_MAX_ROWS}", f"{PACKED_MAX_ROWS + 1}-")  # row_range's values

SPAN_BLOCK = 16  # the rows' own KV that a step attends to: the filled slots rounded up to this


def _call(module: torch.nn.Module, *args):
    return module(*args)


def shape_guards(entries) -> list[bool]:
    """Of a compiled step's guards, the symbolic-shape ones only: which graph a call takes is the
    row range (`CompiledForward` keeps one per range), the weights are the model's own (their
    shapes and dtype are in the artifact's key) and packed weights cannot be serialized."""
    return [entry.guard_type == "SHAPE_ENV" for entry in entries]


@contextlib.contextmanager
def tracing_settings():
    """torch's settings while a graph is traced, scoped to it (the process's own stay as they are):
    one graph per row range, each row count, prompt and cache length on it (dynamic, no automatic
    re-specialisation); sizes equal at the first call (the span attention reads and the prompt's
    length, say) stay two symbols, where duck shapes would merge them and recompile at a call
    where they differ."""
    import torch._dynamo

    limit = max(torch._dynamo.config.cache_size_limit, 64)
    with torch._dynamo.config.patch(automatic_dynamic_shapes=False, cache_size_limit=limit), \
            torch.fx.experimental._config.patch(use_duck_shape=False):
        yield


class CompiledForward:
    """`forward` (a `llama.LlamaForward` or a subclass) with its decode step compiled: the same
    forward pass (prompt, logits, sizes: every other member is `forward`'s), whose `forward_step`
    runs `StaticDecodeStep` as one graph per row range, compiled ahead of time once per machine
    (`artifact_dir`) and loaded by every later process, and whose `draw` samples plainly through
    `StaticSampler`'s graphs (`sampler.draw` otherwise). A step that collects every layer's states
    runs eagerly. `graph_wall_s` / `graph_cpu_s`: the seconds spent loading or compiling
    graphs so far, which a run's record keeps apart from its compute (`Session`)."""

    compiled = True

    def __init__(self, forward, ranges: tuple[str, ...] = ()):
        """`ranges`: the row ranges (`row_range`) that run compiled, the others eagerly; () for all."""
        # both code caches checked first: a refusal stops the run before its first prompt, with nothing changed
        self.artifacts, self.cache = artifact_dir(forward), cache_dir()
        refuse_untrusted(self.artifacts, self.cache, "SPECREJ_CACHE")
        refuse_untrusted(*inductor_cache_dir())
        self.forward_pass = forward
        self.ranges = set(ranges or ALL_RANGES)
        self.module = StaticDecodeStep(forward)
        self.samplers: dict[bool, StaticSampler] = {}  # tempered or not (StaticSampler)
        self.compiled: dict = {}  # graph name (step-<range>, sample-[tempered-]<range>) -> its compiled function
        self.row_ranges: set[str] = set()  # the row ranges the step ran on so far (one graph each)
        self.loaded: set[str] = set()  # the graphs that came from an earlier process's artifact
        self.no_window = torch.zeros(len(forward.layers), dtype=torch.long, device=forward.device)
        self.graph_wall_s = self.graph_cpu_s = 0.0

    def __getattr__(self, name: str):
        if name == "forward_pass":  # not set yet (a copy being made): no recursion
            raise AttributeError(name)
        return getattr(self.forward_pass, name)  # the forward pass's own members (sizes, prompt, logits)

    def new_cache(self):
        """The forward pass's cache with a spare slot per row, so the step's attention span is never
        the whole buffer (whose layout would be a guard: two graphs per row range)."""
        return self.forward_pass.new_cache(spare_slots=1)

    def forward_step(self, cache, tokens: torch.Tensor, pos: int, first_row: int = 0,
                     layer_states: torch.Tensor | None = None) -> torch.Tensor:
        """`forward_pass.forward_step`, as one graph unless it collects every layer's states or its
        rows' range does not run compiled."""
        if layer_states is not None or row_range(tokens.shape[0]) not in self.ranges:
            return self.forward_pass.forward_step(cache, tokens, pos, first_row, layer_states)
        return self.step(cache, tokens, pos, first_row)

    def draw(self, model, hidden: torch.Tensor, params, generator: torch.Generator):
        """`sampler.draw` (one token per row and its log-prob) through `StaticSampler`'s graph when
        the sampling is plain (no top-k or top-p cut, temperature > 0) and its rows' range runs
        compiled; else the eager draw."""
        plain = params.temperature > 0 and not params.top_k and params.top_p == 1
        if not plain or row_range(hidden.shape[0]) not in self.ranges:
            return draw(model, hidden, params, generator)
        return self.sample(hidden, params.temperature, generator)

    def sample(self, hidden: torch.Tensor, temperature: float, generator: torch.Generator):
        """Plain sampling at `temperature` (> 0) from hidden states [rows, hidden]: (tokens, log-probs),
        each [rows]. The rows are a dynamic dimension: one graph per row range, like the step's."""
        tempered = temperature != 1
        if tempered not in self.samplers:
            self.samplers[tempered] = StaticSampler(self.forward_pass, tempered)
        rows = hidden.shape[0]
        u = torch.rand(rows, 1, generator=generator, device=hidden.device)
        # a rollout's first states are the prompt's, expanded (stride 0, made outside inference
        # mode): a contiguous copy keeps the sampler on one graph
        hidden = hidden if hidden.is_contiguous() else hidden.contiguous()
        # data, not a constant of the graph (an artifact keeps only its shape guards)
        temperature = torch.tensor(float(temperature), device=hidden.device)
        return self._run(f"sample-{'tempered-' if tempered else ''}{row_range(rows)}", self.samplers[tempered],
                         (hidden, u, temperature),
                         lambda: _mark_rows(hidden, u))

    def _run(self, name: str, module: torch.nn.Module, args: tuple, mark_dynamic):
        """`module` on `args` through its ahead-of-time graph `name`, loaded or compiled and saved at
        first use, where inductor's cache is scoped to that use (`inductor_cache`); `module` run
        eagerly where torch could not compile the graph or the call lies outside the shapes it was
        made for (a one-token prompt, say). `mark_dynamic()` marks the args' dynamic dimensions,
        called only where the graph may be traced (not on every step)."""
        if name not in self.compiled:
            mark_dynamic()
            with inductor_cache():
                with self._building():
                    self.compiled[name] = self._load_or_compile(name, module, args)
                return self._call(name, module, args)
        return self._call(name, module, args)

    def _call(self, name: str, module: torch.nn.Module, args: tuple):
        compiled = self.compiled[name]
        if compiled is not None and compiled.guard_check(module, *args):
            return compiled(module, *args)
        return module(*args)

    @contextlib.contextmanager
    def _building(self):
        """Counts the wall and CPU seconds within as loading or compiling graphs."""
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            self.graph_wall_s += time.perf_counter() - wall
            self.graph_cpu_s += time.process_time() - cpu

    def _load_or_compile(self, name: str, module: torch.nn.Module, args: tuple):
        """`name`'s artifact loaded, else compiled and saved. Concurrent jobs of a study that need
        the same graph wait for the one compiling it (`<artifact>.lock`) and load what it saved;
        where the cache cannot hold the lock, each compiles its own."""
        path = self.artifacts / f"{name}.bin"
        with contextlib.ExitStack() as held:
            try:
                make_private_dir(self.artifacts, self.cache)
                held.enter_context(entry_lock(path, f"the compiled graph {name}"))
            except OSError:
                pass  # a cache it cannot write: this process compiles its own (and says so when saving)
            loaded = self._load(name, path)
            return loaded if loaded is not None else self._compile(name, module, args, path)

    def _load(self, name: str, path: Path):
        if not path.is_file():
            return None
        try:
            with open(path, "rb") as file:
                compiled = torch.compiler.load_compiled_function(file)
        except Exception as error:  # torch's loader: an artifact it cannot read is compiled again
            warnings.warn(f"--compile on: recompiling {name} ({path} could not be loaded: {error})", stacklevel=4)
            return None
        self.loaded.add(name)
        compiled.disable_guard_check()  # `_run` checks the shape guards itself
        return compiled

    def _compile(self, name: str, module: torch.nn.Module, args: tuple, path: Path):
        try:
            with tracing_settings():
                compiled = torch.compile(_call, fullgraph=True, dynamic=None, options={"guard_filter_fn": shape_guards}
                                         ).aot_compile(((module, *args), {}))
        except Exception as error:  # ahead-of-time compile is experimental in torch: this graph's calls run eagerly
            warnings.warn(f"--compile on: {name} runs eagerly (torch could not compile it: {type(error).__name__}: "
                          f"{error})", stacklevel=4)
            return None
        try:
            compiled.save_compiled_function(str(path))  # written atomically
        except OSError as error:
            warnings.warn(f"--compile on: {name} is not kept ({path}: {error.strerror})", stacklevel=4)
        compiled.disable_guard_check()
        return compiled

    def step(self, cache, tokens: torch.Tensor, pos: int, first_row: int) -> torch.Tensor:
        """tokens [rows, 1] of the cache's rows first_row... at generated position `pos` -> their
        hidden states [rows, hidden]; their k/v written into the cache."""
        import torch._dynamo

        fw = self.forward_pass
        prompt_len = cache.prompt_len
        position = torch.tensor(pos, device=fw.device)
        rotary = fw.rotary(tokens.new_empty(0, dtype=fw.dtype), torch.tensor([[prompt_len + pos]], device=fw.device))
        if fw.sliding_window is None:  # every layer sees every position
            first_visible = self.no_window
        else:
            first_visible = torch.tensor([fw.first_visible(layer, prompt_len + pos) for layer in range(len(fw.layers))],
                                         device=fw.device)
        own_positions = None
        if self.module.attention is not attend_kernel:  # the filled slots rounded up to a block, not the whole buffer
            own_positions = torch.arange(min(cache.max_len, -(-(pos + 1) // SPAN_BLOCK) * SPAN_BLOCK), device=fw.device)
        rows = tokens.shape[0]
        chunk = tokens[:, 0].contiguous()  # one stride (a guard) whatever the rollout's width
        ks = [buffer[first_row : first_row + rows] for buffer in cache.k]
        vs = [buffer[first_row : first_row + rows] for buffer in cache.v]

        def mark_dynamic():  # the prompt's length, the span read, the cache's length and the rows
            for t in cache.prompt_k + cache.prompt_v:
                torch._dynamo.mark_dynamic(t, 1)
            if own_positions is not None:
                torch._dynamo.mark_dynamic(own_positions, 0)
            for t in ks + vs:
                torch._dynamo.mark_dynamic(t, 2)
            _mark_rows(chunk, *ks, *vs)

        rows_graph = row_range(rows)
        self.row_ranges.add(rows_graph)
        args = (chunk, position, rotary, first_visible, own_positions, cache.prompt_k, cache.prompt_v, ks, vs)
        hidden = self._run(f"step-{rows_graph}", self.module, args, mark_dynamic)
        cache.length = pos + 1
        return hidden


def _mark_rows(*tensors: torch.Tensor) -> None:
    """The rows (dimension 0) of `tensors` dynamic where there is more than one, a size torch specialises."""
    import torch._dynamo

    for tensor in tensors:
        if tensor.shape[0] > 1:
            torch._dynamo.maybe_mark_dynamic(tensor, 0)
