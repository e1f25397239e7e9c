"""Sampling parameters and next-token sampling (greedy, temperature, top-k, top-p, seed).

The order of the filters follows Hugging Face / vLLM: temperature scales the logits, then
top-k keeps the k most likely tokens, then top-p keeps the smallest set whose probability
reaches p (the most likely token always stays, so ``top_p == 0`` keeps only it).
``temperature`` below ``MIN_TEMPERATURE`` (0 included) means greedy (argmax) and ignores the
other filters.

Defaults: a request that leaves ``temperature``/``top_p``/``top_k`` unset (``None``) gets the
model's recommended values (:class:`SamplingDefaults`, resolved by ``Engine.prepare`` with
:meth:`SamplingParams.with_defaults`), not OpenAI's temperature 1.0, which makes a small
model ramble. ``sample`` treats a field still unset as neutral (1.0, 1.0, 0).

Reproducibility: every request gets its own ``torch.Generator`` seeded from ``seed``, so the
same request with the same seed yields the same tokens whatever else the process is doing.

Example::

    params = SamplingParams(temperature=0.7, top_p=0.9, seed=42, max_tokens=64, stop=("\\n\\n",))
    gen = make_generator(params.seed, device)
    token = sample(logits, params, gen)    # logits: [vocab]
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import torch

__all__ = [
    "MAX_STOP_STRINGS",
    "MIN_TEMPERATURE",
    "OPENAI_DEFAULTS",
    "SamplingDefaults",
    "SamplingError",
    "SamplingParams",
    "make_generator",
    "sample",
]

#: The engine's bound on stop strings (it matches each against every token's text). OpenAI's
#: APIs take up to 4, checked where their requests are parsed; Anthropic's Messages API
#: states no limit, and its ``stop_sequences`` reach the engine as they are.
MAX_STOP_STRINGS = 64
#: Temperatures below this sample greedily: logits / 1e-38 overflow float32.
MIN_TEMPERATURE = 1e-5


class SamplingError(ValueError):
    """A sampling parameter out of range; ``param`` names it (the request's field)."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class SamplingDefaults:
    """What a request that sets no ``temperature``/``top_p``/``top_k`` samples with.

    Read from the model's ``generation_config`` (as vLLM does), from its model card for the
    bundled model, or set per model in YAML; see ``localmodel.loader.model_sampling_defaults``.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0

    def __post_init__(self) -> None:
        SamplingParams(temperature=self.temperature, top_p=self.top_p, top_k=self.top_k)

    def merged(
        self, temperature: float | None, top_p: float | None, top_k: int | None
    ) -> SamplingDefaults:
        """These defaults with the given (non-``None``) values put over them."""
        return SamplingDefaults(
            self.temperature if temperature is None else temperature,
            self.top_p if top_p is None else top_p,
            self.top_k if top_k is None else top_k,
        )


@dataclass(frozen=True)
class SamplingParams:
    """What a request asks of the sampler; validated on construction (``SamplingError``).

    Attributes:
        max_tokens: completion tokens per choice; ``None`` = as many as fit (see ``Engine.prepare``).
        temperature: 0 = greedy; OpenAI's range is 0…2; ``None`` = the model's default.
        top_p: nucleus mass in [0, 1]; 1 disables, 0 keeps only the most likely token;
            ``None`` = the model's default.
        top_k: keep the k most likely tokens; 0 disables; ``None`` = the model's default.
        seed: makes sampling reproducible; ``None`` draws a fresh seed.
        stop: up to ``MAX_STOP_STRINGS`` strings; the output ends *before* the first occurrence of any of them.
        n: number of choices, generated one after another from one prefill.
    """

    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()
    n: int = 1

    def __post_init__(self) -> None:
        if self.max_tokens is not None and self.max_tokens < 1:
            raise SamplingError("max_tokens", "max_tokens must be at least 1")
        if self.temperature is not None and not 0.0 <= self.temperature <= 2.0:
            raise SamplingError("temperature", "temperature must be between 0 and 2")
        if self.top_p is not None and not 0.0 <= self.top_p <= 1.0:
            raise SamplingError("top_p", "top_p must be between 0 and 1")
        if self.top_k is not None and self.top_k < 0:
            raise SamplingError("top_k", "top_k must be >= 0 (0 disables it)")
        if len(self.stop) > MAX_STOP_STRINGS or any(not s for s in self.stop):
            raise SamplingError("stop", f"stop takes up to {MAX_STOP_STRINGS} non-empty strings")
        if not 1 <= self.n <= 128:
            raise SamplingError("n", "n must be between 1 and 128")

    @property
    def greedy(self) -> bool:
        # NOTE: dividing logits by a temperature this small overflows float32 (inf, then NaN in
        # the softmax); the distribution it asks for is the argmax anyway.
        return self.temperature is not None and self.temperature < MIN_TEMPERATURE

    def with_defaults(self, defaults: SamplingDefaults) -> SamplingParams:
        """These parameters with every unset ``temperature``/``top_p``/``top_k`` filled in."""
        return replace(self, **asdict(defaults.merged(self.temperature, self.top_p, self.top_k)))


#: The OpenAI API's own defaults (what a model without recommendations gets).
OPENAI_DEFAULTS = SamplingDefaults()


def make_generator(seed: int | None, device: torch.device) -> torch.Generator:
    """A per-request RNG on ``device``; a ``None`` seed draws one from the OS."""
    generator = torch.Generator(device=device)
    if seed is None:
        generator.seed()
    else:
        generator.manual_seed(seed & 0xFFFF_FFFF_FFFF_FFFF)  # torch wants an unsigned 64-bit seed
    return generator


@torch.inference_mode()
def sample(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator) -> int:
    """Pick the next token id from ``logits`` (``[vocab]``, any float dtype; not modified)."""
    if params.greedy:
        return int(torch.argmax(logits).item())
    temperature = 1.0 if params.temperature is None else params.temperature
    top_k, top_p = params.top_k or 0, 1.0 if params.top_p is None else params.top_p
    scores = logits.float() / temperature  # [vocab], a new tensor
    if 0 < top_k < scores.shape[-1]:
        kth = torch.topk(scores, top_k).values[-1]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if top_p < 1.0:
        scores = _top_p_filter(scores, top_p)
    probs = torch.softmax(scores, dim=-1)  # [vocab]
    return int(torch.multinomial(probs, 1, generator=generator).item())


def _top_p_filter(scores: torch.Tensor, top_p: float) -> torch.Tensor:
    """Mask all but the smallest set of most likely tokens whose probability mass ≥ ``top_p``."""
    sorted_scores, order = torch.sort(scores, descending=True)  # [vocab]
    sorted_probs = torch.softmax(sorted_scores, dim=-1)
    # Drop a token when the mass *before* it already reaches top_p (the top token always stays).
    drop_sorted = (sorted_probs.cumsum(dim=-1) - sorted_probs) >= top_p
    drop_sorted[0] = False  # also when top_p is 0, or rounds to 0 in float32
    drop = torch.zeros_like(drop_sorted).scatter(0, order, drop_sorted)
    return scores.masked_fill(drop, float("-inf"))
