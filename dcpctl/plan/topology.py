"""Topology: the parallel degrees as one frozen value, validated before any process exists.

Rank layout (SGLang's, tp fastest): rank = engine * world + pp_rank * tp + tp_rank.
Attention-DP replica i of a TP group is tp ranks [i*attn_tp, (i+1)*attn_tp); DCP groups are
contiguous slices of dcp_size inside an attention-TP group, so dcp_rank = attn_tp_rank % dcp.
"""
from __future__ import annotations

from dataclasses import dataclass

from dcpctl.plan.errors import UserError, Violation, divisors

MAX_GPUS = 65536  # rank maps past this are a typo, not a deployment (and would take minutes to build)


@dataclass(frozen=True)
class Topology:
    tp_size: int = 1
    dp_size: int = 1
    enable_dp_attention: bool = False
    dcp_size: int = 1
    ep_size: int = 1
    pp_size: int = 1
    nnodes: int = 1
    gpus_per_node: int | None = None  # None: all ranks of a node on one machine (world // nnodes)

    def __post_init__(self) -> None:
        for name in ("tp_size", "dp_size", "dcp_size", "ep_size", "pp_size", "nnodes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise UserError(f"--{name.replace('_', '-')} must be a positive integer, got {value!r}")
        if self.gpus_per_node is not None and (not isinstance(self.gpus_per_node, int)
                                               or self.gpus_per_node < 1):
            raise UserError(f"--gpus-per-node must be a positive integer, got {self.gpus_per_node!r}")
        for name in ("tp_size", "dp_size", "dcp_size", "ep_size", "pp_size", "nnodes"):
            if getattr(self, name) > MAX_GPUS:
                raise UserError(f"--{name.replace('_', '-')} ({getattr(self, name)}) is larger than the "
                                f"{MAX_GPUS} GPUs dcpctl plans for")
        if self.total_gpus > MAX_GPUS:
            raise UserError(f"tp ({self.tp_size}) * pp ({self.pp_size}) * dp replicas "
                            f"({self.engine_replicas}) = {self.total_gpus} GPUs is more than the {MAX_GPUS} "
                            "dcpctl plans for")

    @property
    def world(self) -> int:
        """GPUs of one engine: tp * pp (DCP and attention-DP add none)."""
        return self.tp_size * self.pp_size

    @property
    def engine_replicas(self) -> int:
        """Whole engines: dp_size without --enable-dp-attention, else 1."""
        return 1 if self.enable_dp_attention else self.dp_size

    @property
    def total_gpus(self) -> int:
        return self.world * self.engine_replicas

    @property
    def attn_dp(self) -> int:
        return self.dp_size if self.enable_dp_attention else 1

    @property
    def attn_tp(self) -> int:
        return max(self.tp_size // self.attn_dp, 1)

    @property
    def ranks_per_node(self) -> int:
        """Ranks are spread evenly over the nodes: node = rank // ranks_per_node."""
        return max(self.total_gpus // self.nnodes, 1)

    def violations(self, num_heads: int | None = None, num_layers: int | None = None) -> list[Violation]:
        """Every SGLang rule plus containment; empty when the topology is valid."""
        out: list[Violation] = []
        tp, dp, c = self.tp_size, self.dp_size, self.dcp_size
        if self.enable_dp_attention and tp % dp:
            ok = [d for d in divisors(tp)]
            out.append(Violation("tp_dp", f"tp ({tp}) is not a multiple of dp ({dp}) with "
                                 f"--enable-dp-attention; valid dp sizes: {ok}"))
            return out  # attn_tp is undefined below
        attn_tp = self.attn_tp
        if tp % c:
            out.append(Violation("tp_dcp",
                                 f"tp ({tp}) is not a multiple of dcp ({c}); valid dcp sizes: "
                                 f"{divisors(attn_tp)}"))
        elif attn_tp % c:
            out.append(Violation("dcp_containment", f"attn_tp ({attn_tp}) = tp ({tp}) // dp ({dp}) is not a "
                                 f"multiple of dcp ({c}): a DCP group would cross attention-DP replicas; "
                                 f"valid dcp sizes: {divisors(attn_tp)}"))
        if tp % self.ep_size:
            # SGLang 0.5.23's argument checks accept it; its model runner raises "tp_size 8 must be divisible
            # by ep_size 16" at startup (model_executor/model_runner_components/moe_ep_setup.py), and its MoE
            # TP width tp // ep // moe_dp is 0 for ep > tp (runtime_context.derive_parallel_widths)
            out.append(Violation("tp_ep", f"tp_size ({tp}) % ep_size ({self.ep_size}) != 0: SGLang's model "
                                 "runner stops at startup (tp_size must be divisible by ep_size); valid ep "
                                 f"sizes: {divisors(tp)}"))
        if num_heads is not None and num_heads % attn_tp:
            ok = [d for d in divisors(num_heads) if tp % d == 0]
            out.append(Violation("heads", f"num_attention_heads ({num_heads}) is not a multiple of attn_tp "
                                 f"({attn_tp}); valid attn_tp sizes: {ok}"))
        if num_layers is not None and self.pp_size > num_layers:
            out.append(Violation("pp_layers", f"pp ({self.pp_size}) > num_hidden_layers ({num_layers})"))
        out += self._node_violations()
        return out

    def _node_violations(self) -> list[Violation]:
        world, n = self.world, self.nnodes
        if n > 1 and self.engine_replicas > 1:
            return [Violation("multi_node_dp", f"dp ({self.dp_size}) whole-engine replicas across nnodes "
                              f"({n}) are not supported (SGLang); use attention DP (--attn-dp-size) across "
                              "nodes")]
        if world % n:
            return [Violation("nodes", f"tp ({self.tp_size}) * pp ({self.pp_size}) = {world} is not a "
                              f"multiple of nnodes ({n}); valid nnodes: {divisors(world)}")]
        total = self.total_gpus
        if self.gpus_per_node is not None and total // n > self.gpus_per_node:
            return [Violation("node_fit", f"total GPUs ({total}) // nnodes ({n}) = {total // n} > "
                              f"gpus_per_node ({self.gpus_per_node}); need nnodes >= "
                              f"{-(-total // self.gpus_per_node)}")]
        return []
