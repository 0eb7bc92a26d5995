"""The installed vLLM's v1 scheduler, built for an engine setup through vLLM's public
config classes (``--machine engine`` on ``vllm`` / ``vllm==X.Y.Z``).

vLLM's ``Scheduler`` takes a ``VllmConfig``, whose classes import torch, transformers and
most of vLLM: unlike the pool's and the manager's files they cannot run in isolation with
placeholders, so the scheduler runs from an installed release (``pip install vllm==X.Y.Z``:
the wheel unpacks to about 0.8 GB, beside torch; no GPU is needed). ``vllm==X.Y.Z`` asks
for that release: a different installed one is a loading error (exit 2), never run in its
place.

The model vLLM is configured for is a one-layer Llama configuration the suite writes into
a temporary folder (a ``config.json`` only: nothing loads weights or a tokenizer); vLLM
inspects its architecture once per process.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from ...machines.engine.driver import EngineSetup, Submission
from ...targets.errors import TargetLoadError

#: The longest sequence the model is configured for (beyond what the suite draws).
MAX_MODEL_LEN = 4096
#: The model's configuration: one layer of one head, the smallest vLLM inspects.
MODEL_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 8,
    "intermediate_size": 16,
    "num_attention_heads": 1,
    "num_key_value_heads": 1,
    "num_hidden_layers": 1,
    "vocab_size": 32,
    "max_position_embeddings": MAX_MODEL_LEN,
}
#: The modules the driver calls into, by the name it reads them under.
MODULES = {
    "config": "vllm.config",
    "scheduler": "vllm.v1.core.sched.scheduler",
    "interface": "vllm.v1.kv_cache_interface",
    "utils": "vllm.v1.core.kv_cache_utils",
    "hashing": "vllm.utils.hashing",
    "request": "vllm.v1.request",
    "outputs": "vllm.v1.outputs",
    "sampling": "vllm.sampling_params",
    "structured": "vllm.v1.structured_output",
}


@dataclass(frozen=True)
class InstalledVllm:
    """The installed release's modules the scheduler driver calls into."""

    version: str
    modules: dict[str, Any]

    @property
    def SamplingParams(self) -> Any:
        return self.modules["sampling"].SamplingParams

    def model_output(self, req_ids: list[str], sampled: list[list[int]]) -> Any:
        """vLLM's ``ModelRunnerOutput`` of one step: each scheduled request's sampled
        tokens, by its index (0.33.0 takes the index map as a field; 0.34.0 computes it)."""
        output = self.modules["outputs"].ModelRunnerOutput
        fields = {f.name for f in dataclasses.fields(output)}
        index = {"req_id_to_index": {r: i for i, r in enumerate(req_ids)}}
        taken = {k: v for k, v in index.items() if k in fields}
        return output(req_ids=req_ids, sampled_token_ids=sampled, **taken)

    @property
    def RequestStatus(self) -> Any:
        return self.modules["request"].RequestStatus

    def scheduler(self, setup: EngineSetup) -> Any:
        """vLLM's ``Scheduler`` (with its ``KVCacheManager``) for ``setup``."""
        config, interface = self.modules["config"], self.modules["interface"]
        scheduler_config = config.SchedulerConfig(
            max_model_len=MAX_MODEL_LEN,
            is_encoder_decoder=False,
            max_num_batched_tokens=setup.max_batch_tokens,
            max_num_seqs=setup.max_batch_size,
            enable_chunked_prefill=True,
            long_prefill_token_threshold=0,
        )
        cache_config = config.CacheConfig(
            block_size=setup.block_size, enable_prefix_caching=setup.enable_caching
        )
        cache_config.num_gpu_blocks = setup.num_blocks
        vllm_config = config.VllmConfig(
            model_config=model_config(self.modules["config"]),
            scheduler_config=scheduler_config,
            cache_config=cache_config,
            device_config=config.DeviceConfig(device="cpu"),
            kv_events_config=config.KVEventsConfig(
                enable_kv_cache_events=setup.enable_kv_cache_events, publisher="null"
            ),
        )
        spec = interface.FullAttentionSpec(
            block_size=setup.block_size, num_kv_heads=1, head_size=1, dtype=torch_float()
        )
        group = interface.KVCacheGroupSpec(layer_names=["layer.0"], kv_cache_spec=spec)
        kv_cache_config = interface.KVCacheConfig(
            num_blocks=setup.num_blocks, kv_cache_tensors=[], kv_cache_groups=[group]
        )
        structured = self.modules["structured"].StructuredOutputManager(vllm_config)
        return self.modules["scheduler"].Scheduler(
            vllm_config, kv_cache_config, structured, setup.block_size
        )

    def block_hasher(self, block_size: int) -> Any:
        """vLLM's block hasher of requests (sha256, vLLM's default), as its engine core
        makes it."""
        hash_fn = self.modules["hashing"].sha256
        self.modules["utils"].init_none_hash(hash_fn)
        return self.modules["utils"].get_request_block_hasher(block_size, hash_fn)

    def request(self, submission: Submission, params: Any, hasher: Any) -> Any:
        """vLLM's ``Request`` for ``submission``, hashed by ``hasher``."""
        return self.modules["request"].Request(
            request_id=submission.request_id,
            prompt_token_ids=list(submission.prompt),
            sampling_params=params,
            pooling_params=None,
            cache_salt=submission.salt,
            block_hasher=hasher,
        )


class Received:
    """What receives the scheduler's published KV event batches (in vLLM's engine core a
    ZMQ publisher, whose subscriber is the router): the batches, kept until drained."""

    def __init__(self) -> None:
        self.batches: list[Any] = []

    def publish(self, events: Any) -> None:
        self.batches.append(events)

    def shutdown(self) -> None:
        self.batches.clear()

    def get_publisher_config(self) -> None:
        return None


def torch_float() -> Any:
    """``torch.float32``, the dtype of the one group's spec (never sized here)."""
    return importlib.import_module("torch").float32


@cache
def model_config(config: Any) -> Any:
    """vLLM's ``ModelConfig`` of :data:`MODEL_CONFIG` (built once: vLLM inspects the
    architecture in a subprocess)."""
    folder = Path(tempfile.mkdtemp(prefix="kvpool-vllm-model-"))
    (folder / "config.json").write_text(json.dumps(MODEL_CONFIG), encoding="utf-8")
    return config.ModelConfig(
        model=str(folder), skip_tokenizer_init=True, max_model_len=MAX_MODEL_LEN, dtype="float32"
    )


@cache
def installed_vllm(wanted: str | None) -> InstalledVllm:
    """The installed vLLM's scheduler modules; ``wanted`` (a version) must be the one
    installed. A :class:`TargetLoadError` says what to install otherwise."""
    from importlib import metadata

    try:
        version = metadata.version("vllm")
    except metadata.PackageNotFoundError:
        version = ""
    try:
        modules = {name: importlib.import_module(module) for name, module in MODULES.items()}
    except ImportError as exc:
        raise TargetLoadError(
            f"vLLM's scheduler runs from an installed vLLM (pip install vllm"
            f"{'==' + wanted if wanted else ''}): importing it failed: {exc}"
        ) from None
    version = version or str(getattr(importlib.import_module("vllm"), "__version__", ""))
    if wanted is not None and version != wanted:
        raise TargetLoadError(
            f"vllm=={wanted} at the engine machine runs the installed vLLM, which is "
            f"{version or 'of no known version'}: pip install vllm=={wanted}"
        )
    return InstalledVllm(version, modules)
