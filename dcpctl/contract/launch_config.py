"""The launch config as frozen, typed sections (docs/launch-config.md); parsed and validated once.

`render_launch_config` (dcpctl/launch/config.py) builds one from a plan; every rank parses the YAML
with `parse_launch_config` in dcpctl/runtime/worker.py and hands typed sections down.  A default
lives here and nowhere else.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from dcpctl.contract.fields import LaunchConfigError, parse_section, parse_value, plain
from dcpctl.contract.limits import ModelLimits, read_model_limits
from dcpctl.plan.request import DEFAULT_CHUNKED_PREFILL
from dcpctl.plan.runtime_choices import DEFAULT_BLAS, DEFAULT_DIST_TIMEOUT_S, DEFAULT_FP8_GEMM

Dtype = Literal["float64", "float32", "bfloat16", "float16"]
Device = Literal["cpu", "cuda"]
DistBackend = Literal["gloo", "nccl"]
CommBackend = Literal["ag_rs", "a2a"]           # the bundled runtime's exchanges (fi_a2a never reaches it)
LseBase = Literal["e", "2"]
AttentionPath = Literal["auto", "paged", "layout"]
SpecAlgorithm = Literal["STANDALONE"]
SchedulePolicy = Literal["fcfs"]
Fp8Gemm = Literal["auto", "w8a16", "w8a8"]      # plan/runtime_choices.py FP8_GEMM_CHOICES
Blas = Literal["cublaslt", "cublas", "keep"]    # plan/runtime_choices.py BLAS_CHOICES
Groups = tuple[tuple[int, ...], ...]

VERSION = 1
DEFAULT_SERVE_MAX_RUNNING = 64      # concurrent requests when serving and nothing else says
DEFAULT_MAX_PREFILL_TOKENS = 16384  # SGLang's --max-prefill-tokens default
DEFAULT_DECODE_HEADROOM = 20        # SGLang's retract decode steps (SGLANG_RETRACT_DECODE_STEPS)


@dataclass(frozen=True)
class ModelSection:
    path: str                  # the checkpoint directory (config.json + *.safetensors)
    dtype: Dtype


@dataclass(frozen=True)
class TopologySection:
    tp_size: int
    attn_tp_size: int
    attn_dp_size: int
    dcp_size: int
    ep_size: int
    pp_size: int


@dataclass(frozen=True)
class GroupsSection:
    """Lists of global-rank lists; each kind partitions the world (runtime/parallel.py GROUP_KINDS)."""

    tp: Groups
    attn_tp: Groups
    attn_dp: Groups
    dcp: Groups
    ep: Groups

    def lists(self) -> dict[str, list[list[int]]]:
        return {k: [list(g) for g in v] for k, v in plain(self).items()}


@dataclass(frozen=True)
class Decisions:
    """What the plan decided (plan/decisions.py); the runtime follows, never re-derives."""

    dcp_comm_backend: CommBackend
    dcp_replicate_q_proj: bool
    lse_base: LseBase           # base of the LSE the layout path's local attention returns (plan: e)
    # auto: paged when the KV pool is on CUDA, else layout (resolved once, attention/selector.resolve_path)
    attention_path: AttentionPath = "auto"
    # the paged path's local attention kernel (--attention-backend; auto: plan/attention_table.py's measured
    # rule)
    attention_backend: str = "auto"


@dataclass(frozen=True)
class RuntimeSection:
    """Numerics and speed settings the plan decided (plan/runtime_choices.py); each kernel module reads its
    own."""

    fp8_gemm: Fp8Gemm = DEFAULT_FP8_GEMM            # block-FP8 GEMMs: per row count, 16-bit or e4m3 acts
    blas: Blas = DEFAULT_BLAS                       # torch's BLAS library for the model's GEMMs (CUDA)
    cublaslt_workspace_kib: int | None = None      # None: torch's own workspace size
    dist_timeout_s: int = DEFAULT_DIST_TIMEOUT_S    # torch.distributed's collective timeout
    attention_table: str | None = None             # tuning tables whose entries replace the shipped ones
    mla_configs: str | None = None
    gemm16_table: str | None = None

    def __post_init__(self) -> None:
        if self.cublaslt_workspace_kib is not None:
            _at_least("runtime.cublaslt_workspace_kib", self.cublaslt_workspace_kib, 1)
        _at_least("runtime.dist_timeout_s", self.dist_timeout_s, 1)


@dataclass(frozen=True)
class KVSection:
    page_size: int              # physical tokens per page per rank (P)
    capacity_tokens: int        # physical KV rows per rank (C); virtual = C * dcp_size
    chunked_prefill_size: int = DEFAULT_CHUNKED_PREFILL
    max_running_requests: int | None = None   # None: no cap (batch); serving fills it (for_serving)

    def __post_init__(self) -> None:
        for key in ("page_size", "capacity_tokens"):
            if getattr(self, key) < 1:
                raise LaunchConfigError(f"launch config key kv.{key} must be >= 1, got {getattr(self, key)}")
        if self.chunked_prefill_size != -1 and self.chunked_prefill_size < 1:
            raise LaunchConfigError("launch config key kv.chunked_prefill_size must be a positive token "
                                    f"count or -1 (no chunking), got {self.chunked_prefill_size}")
        if self.max_running_requests is not None:
            _at_least("kv.max_running_requests", self.max_running_requests, 1)


def _at_least(key: str, value: int, low: int) -> None:
    if value < low:
        raise LaunchConfigError(f"launch config key {key} must be >= {low}, got {value}")


@dataclass(frozen=True)
class ScheduleSection:
    """What each engine step carries and when a request is admitted or retracted (engine/scheduler.py);
    dcpctl/launch/schedule.py decides it from the flags, with its reason."""

    mixed_chunk: bool = True    # a step carries the running decodes plus prefill chunks
                                # (--enable-mixed-chunk)
    max_prefill_tokens: int = DEFAULT_MAX_PREFILL_TOKENS   # tokens of one step (with kv.chunked_prefill_size)
    decode_headroom: int = DEFAULT_DECODE_HEADROOM   # positions each running request may grow, kept free
    policy: SchedulePolicy = "fcfs"
    reason: str = ("scheduler: the launch config's defaults (fcfs; mixed steps; admission on held KV + 20 "
                   "positions of headroom per running request; retract-decode when a step cannot extend "
                   "every request)")

    def __post_init__(self) -> None:
        _at_least("schedule.max_prefill_tokens", self.max_prefill_tokens, 1)
        _at_least("schedule.decode_headroom", self.decode_headroom, 1)


@dataclass(frozen=True)
class SpeculativeSection:
    algorithm: SpecAlgorithm
    draft_model_path: str
    num_draft_tokens: int       # K: candidates verified per request per target step

    def __post_init__(self) -> None:
        _at_least("speculative.num_draft_tokens", self.num_draft_tokens, 1)


@dataclass(frozen=True)
class HiCacheSection:
    host_pages: int             # HiCache L2 host tier: pages of P local rows per rank

    def __post_init__(self) -> None:
        _at_least("hicache.host_pages", self.host_pages, 0)


@dataclass(frozen=True)
class CudaGraphSection:
    """Decode batch sizes and prefill token counts captured as CUDA graphs (dcpctl/launch/cuda_graphs.py
    decides; () = eager)."""

    batch_sizes: tuple[int, ...]
    reason: str                 # the decision's reason, said once by the runtime when it captures
    prefill_tokens: tuple[int, ...] = ()   # token counts each layer's MLP is captured at
                                           # (runtime/models/mlp_graphs.py)
    prefill_reason: str = ""

    def __post_init__(self) -> None:
        for b in self.batch_sizes:
            _at_least("cuda_graph.batch_sizes[]", b, 1)
        for t in self.prefill_tokens:
            _at_least("cuda_graph.prefill_tokens[]", t, 1)


# The sections one engine instance runs with: a plain launch config, or one side of a PD launch.
@dataclass(frozen=True)
class LaunchConfig:
    """One engine's launch config: what every rank of it reads (docs/launch-config.md)."""

    model: ModelSection
    device: Device
    dist_backend: DistBackend
    world_size: int
    topology: TopologySection
    groups: GroupsSection
    decisions: Decisions
    kv: KVSection
    speculative: SpeculativeSection | None = None
    hicache: HiCacheSection | None = None
    cuda_graph: CudaGraphSection | None = None     # None: no graphs (CPU, PD instances, older files)
    schedule: ScheduleSection | None = None        # None: ScheduleSection's defaults
    disaggregation_mode: Literal["prefill", "decode"] | None = None   # set on a PD instance only
    runtime: RuntimeSection = RuntimeSection()
    version: int = VERSION
    # Hugging Face facts of the checkpoint (vocab, context, EOS): read once at parse time, never written
    limits: ModelLimits | None = None

    def __post_init__(self) -> None:
        """The sections the bundled runtime cannot run together (docs/design.md section 5)."""
        if self.hicache is not None and self.speculative is not None:
            raise LaunchConfigError("the bundled runtime does not run the HiCache host tier together with "
                                    "speculative decoding (at any --dcp-size): the launch config has both "
                                    "`hicache` and `speculative`")
        if self.hicache is not None and self.disaggregation_mode == "decode":
            raise LaunchConfigError("the HiCache host tier is not supported on a PD decode instance "
                                    "(disaggregation_mode: decode uses the chunk cache)")

    @staticmethod
    def from_dict(data: Any) -> "LaunchConfig":
        """Parse and validate a plain launch config; LaunchConfigError names the first bad key."""
        if not isinstance(data, dict):
            raise LaunchConfigError(f"a launch config must be a mapping, got {type(data).__name__}")
        if "disaggregation" in data:
            raise LaunchConfigError("this is a PD launch config (it has `disaggregation`): parse it with "
                                    "parse_launch_config")
        body = {k: v for k, v in data.items() if k != "limits"}
        cfg = parse_section(LaunchConfig, body, "")
        _check_version(cfg.version)
        return replace(cfg, limits=read_model_limits(cfg.model.path))

    def to_dict(self) -> dict[str, Any]:
        """The YAML form (the keys of docs/launch-config.md); `limits` stays out of the file."""
        d = plain(replace(self, limits=None))
        return {"version": d.pop("version"), **d}

    def for_serving(self, max_running_requests: int | None = None) -> "LaunchConfig":
        """The config a server runs: kv.max_running_requests = the flag, else the file's, else the default."""
        cap = max_running_requests or self.kv.max_running_requests or DEFAULT_SERVE_MAX_RUNNING
        return replace(self, kv=replace(self.kv, max_running_requests=cap))

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        return self.limits.eos_token_ids if self.limits is not None else ()


@dataclass(frozen=True)
class PDInstance:
    """One side of a PD launch: its global ranks and the sections of its own plan."""

    ranks: tuple[int, ...]
    topology: TopologySection
    groups: GroupsSection
    decisions: Decisions
    kv: KVSection


@dataclass(frozen=True)
class Disaggregation:
    transfer: Literal["page", "token_relayout"]
    prefill: PDInstance
    decode: PDInstance


@dataclass(frozen=True)
class PDLaunchConfig:
    """A prefill and a decode instance in one world (docs/pd.md)."""

    model: ModelSection
    device: Device
    dist_backend: DistBackend
    world_size: int
    disaggregation: Disaggregation
    runtime: RuntimeSection = RuntimeSection()
    version: int = VERSION
    limits: ModelLimits | None = None

    def instance(self, mode: Literal["prefill", "decode"]) -> LaunchConfig:
        """The plain launch config of one instance, with disaggregation_mode set."""
        inst = getattr(self.disaggregation, mode)
        if inst.topology.attn_dp_size != 1:
            raise LaunchConfigError(f"launch config key disaggregation.{mode}.topology.attn_dp_size is "
                                    f"{inst.topology.attn_dp_size}; the bundled PD driver runs one replica "
                                    "per instance (1)")
        return LaunchConfig(self.model, self.device, self.dist_backend, len(inst.ranks), inst.topology,
                            inst.groups, inst.decisions, inst.kv, disaggregation_mode=mode,
                            runtime=self.runtime, version=self.version, limits=self.limits)

    def to_dict(self) -> dict[str, Any]:
        d = plain(replace(self, limits=None))
        return {"version": d.pop("version"), **d}


def parse_launch_config(data: Any) -> LaunchConfig | PDLaunchConfig:
    """Either kind of launch config from its plain (YAML) form."""
    if isinstance(data, dict) and "disaggregation" in data:
        body = {k: v for k, v in data.items() if k != "limits"}
        cfg = parse_section(PDLaunchConfig, body, "")
        _check_version(cfg.version)
        return replace(cfg, limits=read_model_limits(cfg.model.path))
    return LaunchConfig.from_dict(data)


def read_launch_config(path: str | Path) -> LaunchConfig | PDLaunchConfig:
    """Parse a launch config YAML file (errors name the file, the line or the key)."""
    from dcpctl.plan.yamlio import read_yaml
    try:
        return parse_launch_config(read_yaml(Path(path)))
    except LaunchConfigError as e:
        raise LaunchConfigError(f"{path}: {e}") from None


def _check_version(version: int) -> None:
    if version != VERSION:
        raise LaunchConfigError(f"launch config key version is {version}; this dcpctl reads version "
                                f"{VERSION}")


__all__ = ["DEFAULT_CHUNKED_PREFILL", "DEFAULT_SERVE_MAX_RUNNING", "Decisions", "GroupsSection",
           "HiCacheSection", "KVSection", "LaunchConfig", "LaunchConfigError", "ModelLimits", "ModelSection",
           "PDLaunchConfig", "RuntimeSection", "SpeculativeSection", "TopologySection", "parse_launch_config",
           "parse_value", "read_launch_config"]
