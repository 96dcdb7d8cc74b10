"""The generative engine, protocol-free: requests of token ids in, streams of tokens and text out.

`LLMEngine` (engine.py) runs one decoder step at a time over a paged KV cache (block_manager.py) with continuous
batching and chunked prefill (scheduler.py), per-request sampling (sampler.py) and incremental detokenization with
stop strings (detokenizer.py); `AsyncLLMEngine` (async_engine.py) runs its steps in a thread for asyncio callers.
"""

from serve.generation.async_engine import AsyncLLMEngine
from serve.generation.config import EngineConfig
from serve.generation.engine import LLMEngine
from serve.generation.sampling_params import SamplingParams
from serve.generation.sequence import RequestMetrics, RequestOutput

__all__ = ["AsyncLLMEngine", "EngineConfig", "LLMEngine", "RequestMetrics", "RequestOutput", "SamplingParams"]
